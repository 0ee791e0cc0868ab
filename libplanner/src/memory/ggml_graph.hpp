#pragma once
// A model of the compute graph llama.cpp reserves and of ggml-alloc's placement of it, for the compute
// buffers: the CPU backend's (one buffer holds every graph tensor there) and a GPU backend's, where the
// scheduler keeps some tensors in the host buffer (Tensor::host) and a backend may allocate more than a
// tensor's bytes (Tensor::extra, get_alloc_size).
//
// Graph: the tensors ggml-alloc sees, in llama.cpp's node order, with what decides their placement:
// size, layout (type and shape: in-place reuse needs the same layout), in-place capable op, view source,
// input and output flags. Weights and KV cache views are external (never placed) and left out.
// peak_bytes mirrors ggml/src/ggml-alloc.c (b10454): ggml_gallocr_alloc_graph_impl (leafs first, then
// each node; a parent is freed after its last child; in-place reuse of a parent with one child) and
// ggml_dyn_tallocr (best-fit among free blocks, else the end; adjacent free blocks merged).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

namespace kvplan::ggml_graph {

enum class Type : std::uint8_t { f32 = 0, f16 = 1, i8 = 24, i32 = 26, i64 = 27 };  // i8: raw bytes (a quantized tensor's size in ne[0])

// A node's parents as a builder passes them, inline (ggml's GGML_MAX_SRC is 10): a 48-layer graph has thousands of
// tensors, and a heap list per tensor was 40 % of a GPU plan's time (allocation and release, callgrind). The graph
// keeps every tensor's parents in one list (Graph::srcs).
class Srcs {
 public:
  Srcs() = default;
  Srcs(std::initializer_list<int> ids) {
    for (int id : ids) push_back(id);
  }
  void push_back(int id) {
    if (n_ == ids_.size()) throw std::logic_error("ggml_graph: more parents than GGML_MAX_SRC");
    ids_[n_++] = id;
  }
  const int* begin() const { return ids_.data(); }
  const int* end() const { return ids_.data() + n_; }
  std::size_t size() const { return n_; }
  int at(std::size_t i) const {
    if (i >= n_) throw std::out_of_range("ggml_graph: no such parent");
    return ids_[i];
  }

 private:
  std::array<int, 10> ids_{};
  std::size_t n_ = 0;
};

// Where a builder left out identical periods of layers (transformer_graph.cpp): the tensor ids bounding the three
// periods kept just before the cut, [p0, p1), [p1, p2) and [p2, p3), and the first after it, [p3, p4). The graph
// stands for the whole one only where proven_peak_bytes shows ggml-alloc's state repeating from p1 to p2.
struct Cut {
  int p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0;
};

// Small (a cache line): a graph has thousands, built and placed at every probe of a plan's searches, and at 120 bytes
// with its parents inline, writing them was a third of a graph's time (perf). Its parents are in the graph's list.
struct Tensor {
  std::array<std::int64_t, 4> ne{1, 1, 1, 1};
  std::int64_t extra = 0;  // bytes the backend allocates past the tensor (ggml_backend_buft_get_alloc_size)
  int view_of = -1;        // a view: shares its source's memory (ggml_impl_is_view)
  std::uint32_t first_src = 0;  // its parents: Graph::srcs(), placed parents only, in src order
  std::uint8_t n_srcs = 0;
  Type type = Type::f32;
  bool external = false;  // memory owned elsewhere (a KV cache row written by SET_ROWS)
  bool input = false;     // GGML_TENSOR_FLAG_INPUT
  bool output = false;    // GGML_TENSOR_FLAG_OUTPUT: never freed, never reused
  bool inplace = false;   // ggml_op_can_inplace(op)
  // In the host (CPU) buffer, not the device's: a graph input the scheduler keeps on the CPU backend, or the
  // host node that reads a host weight (ggml-backend.cpp ggml_backend_sched_split_graph, "1.inp"/"1.wgt").
  bool host = false;
  bool copy_of_node = false;  // a split input copied from a host node, not from a graph input (no input on the host)
  // A host tensor freed once its split has run (the token rows after their copy to the device, the K/V rows a CPU
  // cache write reads): ggml-alloc reuses its memory, so the host buffer holds the largest, not their sum.
  bool transient = false;
  std::int64_t bytes() const;
};

class Graph {
 public:
  // A leaf set by the caller (inp_tokens, the KQ mask, ...): placed before any node.
  int input(Type type, std::array<std::int64_t, 4> ne);
  // A tensor of the host buffer the device graph does not read (the token rows a device gets a copy of).
  int host_leaf(Type type, std::array<std::int64_t, 4> ne);
  // Host memory of a CPU split that reads rows the device computed (a layer's K and V rows for a cache write in RAM):
  // transient, `bytes` for the split's copies together.
  int host_rows(std::int64_t bytes);
  // A device split's input copied from a host node (the token rows): placed like an input, kept n_copies times.
  int node_copy(Type type, std::array<std::int64_t, 4> ne);
  // A node computed into a new tensor of this layout.
  int op(Type type, std::array<std::int64_t, 4> ne, const Srcs& srcs);
  // A node whose op may overwrite its first parent of the same layout (ADD, MUL, RMS_NORM, ROPE, SOFT_MAX, ...).
  int inplace(const Srcs& srcs);
  int inplace_as(std::array<std::int64_t, 4> ne, const Srcs& srcs);  // same, with another shape (a reshaped result)
  // A view (RESHAPE, VIEW, PERMUTE) of a tensor, with the viewed shape.
  int view(int of, std::array<std::int64_t, 4> ne);
  // A node writing into memory the graph does not own (SET_ROWS into the cache): keeps its parents alive.
  int external(const Srcs& srcs);
  void reserve(std::size_t tensors) {
    tensors_.reserve(tensors);
    nodes_.reserve(tensors);
    srcs_.reserve(3 * tensors);  // about two parents a tensor, more in attention
  }
  void mark_output(int t) { tensors_[static_cast<std::size_t>(t)].output = true; }
  void mark_host(int t) { tensors_[static_cast<std::size_t>(t)].host = true; }
  // Pipeline parallelism flags every split input copy output as well, so ggml-alloc never frees or reuses it.
  void keep_inputs() {
    for (int l : leafs_) tensors_[static_cast<std::size_t>(l)].output |= tensors_[static_cast<std::size_t>(l)].input;
  }
  void mark_host_if(bool host, int t) { tensors_[static_cast<std::size_t>(t)].host |= host; }
  void add_extra(int t, std::int64_t bytes) { tensors_[static_cast<std::size_t>(t)].extra += bytes; }
  const Tensor& at(int t) const { return tensors_[static_cast<std::size_t>(t)]; }
  // A tensor's parents (its srcs), in src order.
  std::span<const int> srcs(const Tensor& t) const { return {srcs_.data() + t.first_src, t.n_srcs}; }
  std::span<const int> srcs(int t) const { return srcs(at(t)); }

  // Bytes the device needs on top of the placed peak for something the graph does not place (a host weight copy of a
  // matmul kvplan does not model node by node, counted at the peak: an over-estimate).
  void add_unplaced(std::int64_t bytes) { unplaced_ = std::max(unplaced_, bytes); }
  void clear_unplaced() { unplaced_ = 0; }
  // A raw-bytes tensor (Type::i8: a host matrix's copy) set to another size.
  void resize_raw(int t, std::int64_t bytes) {
    Tensor& x = tensors_.at(static_cast<std::size_t>(t));
    if (x.type != Type::i8) throw std::logic_error("ggml_graph: resize_raw of a typed tensor");
    x.ne = {bytes, 1, 1, 1};
  }
  std::int64_t unplaced() const { return unplaced_; }

  void add_cut(Cut cut) { cuts_.push_back(cut); }  // in tensor order, each after the one before's p4
  bool cut() const { return !cuts_.empty(); }
  const std::vector<Cut>& cuts() const { return cuts_; }

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<int>& leafs() const { return leafs_; }
  const std::vector<int>& nodes() const { return nodes_; }

 private:
  Tensor& push(bool leaf, const Srcs& srcs = {});
  int last() const;
  std::vector<Tensor> tensors_;
  std::vector<int> leafs_, nodes_;
  std::vector<int> srcs_;  // every tensor's parents, one after another (Tensor::first_src)
  std::int64_t unplaced_ = 0;
  std::vector<Cut> cuts_;
};

// The size ggml-alloc reserves for the graph: the high-water mark of its placement (host tensors left out). A graph
// with a cut throws std::logic_error: it needs proven_peak_bytes.
std::int64_t peak_bytes(const Graph& graph, std::int64_t alignment);
// The same for a graph that may have a cut: the whole graph's peak, or nullopt where the cut's repeat is not proven
// (build the whole graph then). The proof for each cut, ggml-alloc being deterministic: the kept periods before and after the cut
// are the same tensors up to an id shift (tensors before p0 read as they are); the allocator's state at p2 is its
// state at p1 shifted by one period (free blocks, and each tensor's placement and remaining readers); and every
// tensor before p0 that the periods read is still read after p3, so no period releases or reuses it. Every left-out
// period then starts in the state the last kept one started in, repeats its placements, and the peak is unchanged.
// Several cuts: putting one's periods back leaves the placement after them as it was (each tensor has the same readers
// left), so the next cut's proof holds on that graph too, and so on.
std::optional<std::int64_t> proven_peak_bytes(const Graph& graph, std::int64_t alignment);
// What the host buffer holds of a GPU graph: every graph input (the scheduler keeps inputs on the CPU backend and
// copies those a device split reads) and every host tensor, each aligned. They are all live at once: the inputs
// are set before the graph runs and the only host node (the token rows) is an input of the device split.
// input_copies: pipeline parallelism keeps n_copies of each input on the CPU backend too (pass 5, "4.cpy").
std::int64_t host_bytes(const Graph& graph, std::int64_t alignment, int input_copies = 1);
// The device's split inputs (every non-host graph input, copied into the device buffer at the start of its
// split), each aligned: what pipeline parallelism keeps n_copies times.
std::int64_t input_bytes(const Graph& graph, std::int64_t alignment);

}  // namespace kvplan::ggml_graph

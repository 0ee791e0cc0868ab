#pragma once
// A model of the compute graph llama.cpp reserves and of ggml-alloc's placement of it, for the compute
// buffer of the CPU backend (one buffer holds every graph tensor there).
//
// Graph: the tensors ggml-alloc sees, in llama.cpp's node order, with what decides their placement:
// size, layout (type and shape: in-place reuse needs the same layout), in-place capable op, view source,
// input and output flags. Weights and KV cache views are external (never placed) and left out.
// peak_bytes mirrors ggml/src/ggml-alloc.c (b10454): ggml_gallocr_alloc_graph_impl (leafs first, then
// each node; a parent is freed after its last child; in-place reuse of a parent with one child) and
// ggml_dyn_tallocr (best-fit among free blocks, else the end; adjacent free blocks merged).

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvplan::ggml_graph {

enum class Type : int { f32 = 0, f16 = 1, i8 = 24, i32 = 26, i64 = 27 };  // i8: raw bytes (a quantized tensor's size in ne[0])

struct Tensor {
  Type type = Type::f32;
  std::array<std::int64_t, 4> ne{1, 1, 1, 1};
  int view_of = -1;       // a view: shares its source's memory (ggml_impl_is_view)
  bool external = false;  // memory owned elsewhere (a KV cache row written by SET_ROWS)
  bool input = false;     // GGML_TENSOR_FLAG_INPUT
  bool output = false;    // GGML_TENSOR_FLAG_OUTPUT: never freed, never reused
  bool inplace = false;   // ggml_op_can_inplace(op)
  std::vector<int> srcs;  // placed parents only, in src order
  std::int64_t bytes() const;
};

class Graph {
 public:
  // A leaf set by the caller (inp_tokens, the KQ mask, ...): placed before any node.
  int input(Type type, std::array<std::int64_t, 4> ne);
  // A node computed into a new tensor of this layout.
  int op(Type type, std::array<std::int64_t, 4> ne, std::vector<int> srcs);
  // A node whose op may overwrite its first parent of the same layout (ADD, MUL, RMS_NORM, ROPE, SOFT_MAX, ...).
  int inplace(std::vector<int> srcs);
  int inplace_as(std::array<std::int64_t, 4> ne, std::vector<int> srcs);  // same, with another shape (a reshaped result)
  // A view (RESHAPE, VIEW, PERMUTE) of a tensor, with the viewed shape.
  int view(int of, std::array<std::int64_t, 4> ne);
  // A node writing into memory the graph does not own (SET_ROWS into the cache): keeps its parents alive.
  int external(std::vector<int> srcs);
  void mark_output(int t) { tensors_[static_cast<std::size_t>(t)].output = true; }
  const Tensor& at(int t) const { return tensors_[static_cast<std::size_t>(t)]; }

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<int>& leafs() const { return leafs_; }
  const std::vector<int>& nodes() const { return nodes_; }

 private:
  int add(Tensor t, bool leaf);
  std::vector<Tensor> tensors_;
  std::vector<int> leafs_, nodes_;
};

// The size ggml-alloc reserves for the graph: the high-water mark of its placement.
std::int64_t peak_bytes(const Graph& graph, std::int64_t alignment);

}  // namespace kvplan::ggml_graph

#include "ggml_graph.hpp"

#include <algorithm>
#include <limits>

#include "kvplan/checked.hpp"

namespace kvplan::ggml_graph {

static_assert(sizeof(Tensor) <= 64, "a tensor in a cache line: graphs are built and placed at every probe");

std::int64_t Tensor::bytes() const {
  const std::int64_t size = type == Type::i8 ? 1 : type == Type::f16 ? 2 : type == Type::i64 ? 8 : 4;
  std::int64_t n = size;
  for (std::int64_t d : ne) n = checked_mul(n, d, "compute graph tensor");
  return checked_add(n, extra, "compute graph tensor");
}

// A new tensor at the end of the list, built in place (a 48-layer graph has thousands: a tensor built on the stack
// and copied in twice cost a tenth of a sweep's graph building), listed as a leaf or a node, with its parents.
Tensor& Graph::push(bool leaf, const Srcs& srcs) {
  const int id = static_cast<int>(tensors_.size());
  (leaf ? leafs_ : nodes_).push_back(id);
  Tensor& t = tensors_.emplace_back();
  t.first_src = static_cast<std::uint32_t>(srcs_.size());
  t.n_srcs = static_cast<std::uint8_t>(srcs.size());
  for (int src : srcs) srcs_.push_back(src);  // a few each: a call to memmove per tensor cost more
  return t;
}

int Graph::last() const { return static_cast<int>(tensors_.size()) - 1; }

int Graph::input(Type type, std::array<std::int64_t, 4> ne) {
  Tensor& t = push(true);
  t.type = type, t.ne = ne, t.input = true;
  return last();
}

int Graph::host_leaf(Type type, std::array<std::int64_t, 4> ne) {
  Tensor& t = push(true);
  t.type = type, t.ne = ne, t.host = true, t.transient = true;
  return last();
}

int Graph::host_rows(std::int64_t bytes) {
  Tensor& t = push(true);
  t.type = Type::i8, t.ne = {bytes, 1, 1, 1}, t.host = true, t.transient = true;
  return last();
}

int Graph::node_copy(Type type, std::array<std::int64_t, 4> ne) {
  Tensor& t = push(true);
  t.type = type, t.ne = ne, t.input = true, t.copy_of_node = true;
  return last();
}

int Graph::op(Type type, std::array<std::int64_t, 4> ne, const Srcs& srcs) {
  Tensor& t = push(false, srcs);
  t.type = type, t.ne = ne;
  return last();
}

int Graph::inplace(const Srcs& srcs) { return inplace_as(at(srcs.at(0)).ne, srcs); }

int Graph::inplace_as(std::array<std::int64_t, 4> ne, const Srcs& srcs) {
  const Type type = at(srcs.at(0)).type;  // read before the list may grow
  Tensor& t = push(false, srcs);
  t.type = type, t.ne = ne, t.inplace = true;
  return last();
}

int Graph::view(int of, std::array<std::int64_t, 4> ne) {
  // A view of a view shares the first source's memory (ggml_view_impl sets view_src to the root).
  const int root = at(of).view_of >= 0 ? at(of).view_of : of;
  const Type type = at(of).type;
  Tensor& t = push(false, {of});
  t.type = type, t.ne = ne, t.view_of = root;
  return last();
}

int Graph::external(const Srcs& srcs) {
  Tensor& t = push(false, srcs);
  t.external = true;
  return last();
}

namespace {

std::int64_t align_up(std::int64_t n, std::int64_t a) { return checked_add(n, a - 1, "compute buffer") / a * a; }

// The same shape, compared element by element (std::array's == calls memcmp: ten million calls in the bench sweep).
bool same_shape(const std::array<std::int64_t, 4>& a, const std::array<std::int64_t, 4>& b) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

// ggml_dyn_tallocr with one chunk (the CPU buffer type has no maximum size).
class DynAllocator {
 public:
  explicit DynAllocator(std::int64_t alignment) : alignment_(alignment) {
    blocks_.push_back({0, std::numeric_limits<std::int64_t>::max() / 2});
  }
  std::int64_t alloc(std::int64_t size) {
    size = align_up(size, alignment_);
    // best fit among the blocks before the last; ties go to the later block (<=)
    int best = -1;
    std::int64_t best_size = std::numeric_limits<std::int64_t>::max();
    for (int i = 0; i + 1 < static_cast<int>(blocks_.size()); ++i) {
      if (blocks_[i].size >= size && blocks_[i].size <= best_size) best = i, best_size = blocks_[i].size;
    }
    if (best < 0) best = static_cast<int>(blocks_.size()) - 1;
    Block& b = blocks_[static_cast<size_t>(best)];
    if (size > b.size) size_overflow("compute buffer");  // beyond the 2^62 bytes of the last block
    const std::int64_t offset = b.offset;
    b.offset += size;
    b.size -= size;
    if (b.size == 0) blocks_.erase(blocks_.begin() + best);
    max_ = std::max(max_, offset + size);
    return offset;
  }
  void free(std::int64_t offset, std::int64_t size) {
    size = align_up(size, alignment_);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Block& b = blocks_[i];
      if (b.offset + b.size == offset) {  // the freed bytes follow this block
        b.size += size;
        if (i + 1 < blocks_.size() && b.offset + b.size == blocks_[i + 1].offset) {
          b.size += blocks_[i + 1].size;
          blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        }
        return;
      }
      if (offset + size == b.offset) {  // the freed bytes precede this block
        b.offset = offset;
        b.size += size;
        if (i > 0 && blocks_[i - 1].offset + blocks_[i - 1].size == b.offset) {
          blocks_[i - 1].size += b.size;
          blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
        }
        return;
      }
    }
    auto pos = std::find_if(blocks_.begin(), blocks_.end(), [&](const Block& b) { return b.offset >= offset; });
    blocks_.insert(pos, {offset, size});
  }
  std::int64_t max_size() const { return max_; }
  struct Block {
    std::int64_t offset, size;
    bool operator==(const Block&) const = default;
  };
  const std::vector<Block>& blocks() const { return blocks_; }

 private:
  std::int64_t alignment_;
  std::vector<Block> blocks_;
  std::int64_t max_ = 0;
};

struct State {
  int children = 0, views = 0;
  bool allocated = false;
  std::int64_t offset = 0;
  bool operator==(const State& o) const {
    return children == o.children && views == o.views && allocated == o.allocated && (!allocated || offset == o.offset);
  }
  bool idle() const { return children == 0 && views == 0 && !allocated; }
};

// ggml_gallocr_alloc_graph_impl: the leafs placed first, each node's readers and views counted, then node by node.
class Placement {
 public:
  Placement(const Graph& g, std::int64_t alignment) : g_(g), T_(g.tensors()), st_(T_.size()), mem_(alignment) {
    for (int l : g.leafs()) allocate(l);
    for (int i : g.nodes()) {
      const Tensor& t = T_[at(i)];
      if (t.view_of >= 0) ++st_[at(t.view_of)].views;
      for (int p : g.srcs(t)) ++st_[at(p)].children;
    }
  }
  // One node: its parents and itself placed, then each parent released after its last reader.
  void place(int i) {
    const std::span<const int> srcs = g_.srcs(i);
    for (int p : srcs) allocate(p);
    allocate(i);
    for (int p : srcs) {
      State& ps = st_[at(p)];
      if (--ps.children != 0 || ps.views != 0) continue;
      if (T_[at(p)].view_of >= 0) {
        State& rs = st_[at(T_[at(p)].view_of)];
        if (--rs.views == 0 && rs.children == 0 && rs.allocated) release(T_[at(p)].view_of);
      } else if (ps.allocated) {
        release(p);
      }
    }
  }
  std::int64_t peak() const { return mem_.max_size(); }
  const State& state(int i) const { return st_[at(i)]; }
  const std::vector<State>& states() const { return st_; }
  const std::vector<DynAllocator::Block>& blocks() const { return mem_.blocks(); }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }
  // ggml_gallocr_allocate_node
  void allocate(int i) {
    const Tensor& t = T_[at(i)];
    State& s = st_[at(i)];
    if (s.allocated || t.view_of >= 0 || t.external || t.host) return;
    s.allocated = true;
    if (t.inplace) {
      for (int p : g_.srcs(t)) {
        State& ps = st_[at(p)];
        const Tensor& pt = T_[at(p)];
        // views are never owned by the allocator (ggml_gallocr_is_own), so only a plain parent is reused
        if (!ps.allocated || pt.output || pt.type != t.type || !same_shape(pt.ne, t.ne)) continue;
        if (ps.children == 1 && ps.views == 0) {
          s.offset = ps.offset;
          ps.allocated = false;  // the node takes the parent's memory over
          return;
        }
      }
    }
    s.offset = mem_.alloc(t.bytes());
  }
  void release(int i) {
    const Tensor& t = T_[at(i)];
    if (t.output || t.host) return;
    mem_.free(st_[at(i)].offset, t.bytes());
    st_[at(i)].allocated = false;
  }
  const Graph& g_;
  const std::vector<Tensor>& T_;
  std::vector<State> st_;
  DynAllocator mem_;
};

// Tensor b is tensor a one period later: the same layout and flags, its parents and view source shifted by `shift`
// where a's are at or after `moved` (tensors of the periods), the same before it.
bool shifted(const Graph& g, const Tensor& a, const Tensor& b, int moved, int shift) {
  auto map = [&](int id) { return id >= moved ? id + shift : id; };
  if (a.type != b.type || !same_shape(a.ne, b.ne) || a.external != b.external || a.input != b.input || a.output != b.output ||
      a.inplace != b.inplace || a.host != b.host || a.copy_of_node != b.copy_of_node || a.extra != b.extra ||
      a.n_srcs != b.n_srcs || (a.view_of < 0 ? b.view_of != a.view_of : b.view_of != map(a.view_of)))
    return false;
  const std::span<const int> as = g.srcs(a), bs = g.srcs(b);
  for (std::size_t k = 0; k < as.size(); ++k)
    if (bs[k] != map(as[k])) return false;
  return true;
}

// The kept periods are one another shifted: [p1, p2) -> [p2, p3) -> [p3, p4), all nodes (no input, lasting host or
// output tensor, which host_bytes, input_bytes and the leafs would count per period), and what follows p4 reads nothing
// of the periods before p3.
bool periods_repeat(const Graph& g, const Cut& c) {
  const auto& T = g.tensors();
  const int period = c.p1 - c.p0;
  if (period <= 0 || c.p2 - c.p1 != period || c.p3 - c.p2 != period || c.p4 - c.p3 != period || c.p4 > static_cast<int>(T.size()))
    return false;
  auto tensor = [&](int id) -> const Tensor& { return T[static_cast<std::size_t>(id)]; };
  // A transient host tensor (the K/V rows a cache in RAM is written from) may repeat: the device never places it,
  // and host_bytes keeps the largest of them, which identical periods do not change.
  for (int id = c.p1; id < c.p4; ++id)
    if (tensor(id).input || (tensor(id).host && !tensor(id).transient) || tensor(id).output || tensor(id).copy_of_node)
      return false;
  for (int id = c.p1; id < c.p3; ++id)
    if (!shifted(g, tensor(id), tensor(id + period), id < c.p2 ? c.p0 : c.p1, period)) return false;
  auto outside = [&](int id) { return id < c.p0 || id >= c.p3; };
  for (int id = c.p4; id < static_cast<int>(T.size()); ++id) {
    if (tensor(id).view_of >= 0 && !outside(tensor(id).view_of)) return false;
    for (int p : g.srcs(id))
      if (!outside(p)) return false;
  }
  return true;
}

// At p2, the state at p1 one period on: the same free blocks; each tensor of [p0, p2) as it was, found one period
// later; [p0, p1) done with; the tensors before p0 where they were.
bool state_repeats(const Placement& now, const std::vector<State>& at_p1, const std::vector<DynAllocator::Block>& blocks_p1,
                   const Cut& c) {
  if (now.blocks() != blocks_p1) return false;
  const int period = c.p1 - c.p0;
  for (int id = c.p0; id < c.p2; ++id)
    if (!(now.state(id + period) == at_p1[static_cast<std::size_t>(id)])) return false;
  for (int id = c.p0; id < c.p1; ++id)
    if (!now.state(id).idle()) return false;
  for (int id = 0; id < c.p0; ++id) {
    const State &was = at_p1[static_cast<std::size_t>(id)], &is = now.state(id);
    if (was.allocated != is.allocated || (is.allocated && was.offset != is.offset)) return false;
  }
  return true;
}

// At p3: every tensor before p0 that [p2, p3) reads (or whose view it reads) still has a reader or a view left, so
// neither this period nor a left-out one (which have more left) releases it or takes it over in place.
bool earlier_tensors_kept(const Graph& g, const Placement& now, const Cut& c) {
  auto kept = [&](int id) { return id >= c.p0 || now.state(id).children + now.state(id).views >= 1; };
  for (int id = c.p2; id < c.p3; ++id)
    for (int p : g.srcs(id))
      if (!kept(p) || (g.at(p).view_of >= 0 && !kept(g.at(p).view_of))) return false;
  return true;
}

}  // namespace

std::optional<std::int64_t> proven_peak_bytes(const Graph& g, std::int64_t alignment) {
  const std::vector<Cut>& cuts = g.cuts();
  for (std::size_t k = 0; k < cuts.size(); ++k)
    if (!periods_repeat(g, cuts[k]) || (k > 0 && cuts[k - 1].p4 > cuts[k].p0)) return std::nullopt;
  Placement placement(g, alignment);
  std::vector<State> at_p1;
  std::vector<DynAllocator::Block> blocks_p1;
  auto cut = cuts.begin();  // the cut whose periods are next
  for (int i : g.nodes()) {
    if (cut != cuts.end() && i == cut->p1) {
      at_p1.assign(placement.states().begin(), placement.states().begin() + cut->p2);
      blocks_p1 = placement.blocks();
    } else if (cut != cuts.end() && i == cut->p2 && !state_repeats(placement, at_p1, blocks_p1, *cut)) {
      return std::nullopt;
    } else if (cut != cuts.end() && i == cut->p3 && !earlier_tensors_kept(g, placement, *(cut++))) {
      return std::nullopt;
    }
    placement.place(i);
  }
  return placement.peak();
}

std::int64_t peak_bytes(const Graph& g, std::int64_t alignment) {
  if (g.cut()) throw std::logic_error("ggml_graph: peak_bytes of a cut graph (use proven_peak_bytes)");
  return *proven_peak_bytes(g, alignment);
}

std::int64_t host_bytes(const Graph& g, std::int64_t alignment, int input_copies) {
  std::int64_t sum = 0, transient = 0;
  for (const Tensor& t : g.tensors()) {
    if (!(t.host || t.input) || t.view_of >= 0 || t.copy_of_node) continue;
    const std::int64_t one = align_up(t.bytes(), alignment);
    if (t.transient) transient = std::max(transient, one);
    else sum = checked_add(sum, t.input ? checked_mul(one, input_copies, "host compute buffer") : one, "host compute buffer");
  }
  return checked_add(sum, transient, "host compute buffer");
}

std::int64_t input_bytes(const Graph& g, std::int64_t alignment) {
  std::int64_t sum = 0;
  for (int l : g.leafs()) {
    const Tensor& t = g.at(l);
    if (t.input && !t.host) sum = checked_add(sum, align_up(t.bytes(), alignment), "compute buffer");
  }
  return sum;
}

}  // namespace kvplan::ggml_graph

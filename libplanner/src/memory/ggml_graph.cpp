#include "ggml_graph.hpp"

#include <algorithm>
#include <limits>

#include "kvplan/checked.hpp"

namespace kvplan::ggml_graph {

std::int64_t Tensor::bytes() const {
  const std::int64_t size = type == Type::i8 ? 1 : type == Type::f16 ? 2 : type == Type::i64 ? 8 : 4;
  std::int64_t n = size;
  for (std::int64_t d : ne) n = checked_mul(n, d, "compute graph tensor");
  return checked_add(n, extra, "compute graph tensor");
}

int Graph::add(Tensor t, bool leaf) {
  tensors_.push_back(std::move(t));
  const int id = static_cast<int>(tensors_.size()) - 1;
  (leaf ? leafs_ : nodes_).push_back(id);
  return id;
}

int Graph::input(Type type, std::array<std::int64_t, 4> ne) {
  Tensor t;
  t.type = type, t.ne = ne, t.input = true;
  return add(t, true);
}

int Graph::host_leaf(Type type, std::array<std::int64_t, 4> ne) {
  Tensor t;
  t.type = type, t.ne = ne, t.host = true, t.transient = true;
  return add(t, true);
}

int Graph::host_rows(std::int64_t bytes) {
  Tensor t;
  t.type = Type::i8, t.ne = {bytes, 1, 1, 1}, t.host = true, t.transient = true;
  return add(t, true);
}

int Graph::node_copy(Type type, std::array<std::int64_t, 4> ne) {
  Tensor t;
  t.type = type, t.ne = ne, t.input = true, t.copy_of_node = true;
  return add(t, true);
}

int Graph::op(Type type, std::array<std::int64_t, 4> ne, Srcs srcs) {
  Tensor t;
  t.type = type, t.ne = ne, t.srcs = std::move(srcs);
  return add(t, false);
}

int Graph::inplace(Srcs srcs) {
  const auto ne = at(srcs.at(0)).ne;  // read before srcs is moved from
  return inplace_as(ne, std::move(srcs));
}

int Graph::inplace_as(std::array<std::int64_t, 4> ne, Srcs srcs) {
  Tensor t;
  t.type = at(srcs.at(0)).type, t.ne = ne, t.inplace = true, t.srcs = std::move(srcs);
  return add(t, false);
}

int Graph::view(int of, std::array<std::int64_t, 4> ne) {
  Tensor t;
  // A view of a view shares the first source's memory (ggml_view_impl sets view_src to the root).
  const int root = at(of).view_of >= 0 ? at(of).view_of : of;
  t.type = at(of).type, t.ne = ne, t.view_of = root, t.srcs = {of};
  return add(t, false);
}

int Graph::external(Srcs srcs) {
  Tensor t;
  t.external = true, t.srcs = std::move(srcs);
  return add(t, false);
}

namespace {

std::int64_t align_up(std::int64_t n, std::int64_t a) { return checked_add(n, a - 1, "compute buffer") / a * a; }

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

 private:
  struct Block {
    std::int64_t offset, size;
  };
  std::int64_t alignment_;
  std::vector<Block> blocks_;
  std::int64_t max_ = 0;
};

struct State {
  int children = 0, views = 0;
  bool allocated = false;
  std::int64_t offset = 0;
};

}  // namespace

std::int64_t peak_bytes(const Graph& g, std::int64_t alignment) {
  const auto& T = g.tensors();
  std::vector<State> st(T.size());
  DynAllocator mem(alignment);
  auto is_view = [&](int i) { return T[static_cast<size_t>(i)].view_of >= 0; };
  auto same_layout = [&](const Tensor& a, const Tensor& b) { return a.type == b.type && a.ne == b.ne; };

  // ggml_gallocr_allocate_node
  auto allocate = [&](int i) {
    const Tensor& t = T[static_cast<size_t>(i)];
    State& s = st[static_cast<size_t>(i)];
    if (s.allocated || is_view(i) || t.external || t.host) return;
    s.allocated = true;
    if (t.inplace) {
      for (int p : t.srcs) {
        State& ps = st[static_cast<size_t>(p)];
        const Tensor& pt = T[static_cast<size_t>(p)];
        // views are never owned by the allocator (ggml_gallocr_is_own), so only a plain parent is reused
        if (!ps.allocated || pt.output || !same_layout(t, pt)) continue;
        if (ps.children == 1 && ps.views == 0) {
          s.offset = ps.offset;
          ps.allocated = false;  // the node takes the parent's memory over
          return;
        }
      }
    }
    s.offset = mem.alloc(t.bytes());
  };
  auto release = [&](int i) {
    const Tensor& t = T[static_cast<size_t>(i)];
    if (t.output || t.host) return;
    mem.free(st[static_cast<size_t>(i)].offset, t.bytes());
    st[static_cast<size_t>(i)].allocated = false;
  };

  for (int l : g.leafs()) allocate(l);
  for (int i : g.nodes()) {
    const Tensor& t = T[static_cast<size_t>(i)];
    if (is_view(i)) ++st[static_cast<size_t>(t.view_of)].views;
    for (int p : t.srcs) ++st[static_cast<size_t>(p)].children;
  }
  for (int i : g.nodes()) {
    const Tensor& t = T[static_cast<size_t>(i)];
    for (int p : t.srcs) allocate(p);
    allocate(i);
    for (int p : t.srcs) {
      State& ps = st[static_cast<size_t>(p)];
      if (--ps.children != 0 || ps.views != 0) continue;
      if (is_view(p)) {
        const int root = T[static_cast<size_t>(p)].view_of;
        State& rs = st[static_cast<size_t>(root)];
        if (--rs.views == 0 && rs.children == 0 && rs.allocated) release(root);
      } else if (ps.allocated) {
        release(p);
      }
    }
  }
  return mem.max_size();
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

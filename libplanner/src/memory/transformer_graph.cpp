#include "transformer_graph.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>

namespace kvplan {

int kv_rotation_size(int head_size) {
  int n = 64;
  while (head_size > 0 && head_size % (n * 2) == 0) n *= 2;
  return n;
}

namespace {
using ggml_graph::Graph;
using ggml_graph::Type;

// The graph inputs of one KV cache (the full one, or the sliding-window one of an iSWA model), created on
// first use, which is the order ggml_build_forward_expand meets them in.
struct CacheInputs {
  std::int64_t n_kv = 0;
  int head_k = 0, head_v = 0;
  int rot_k = -1, rot_v = -1, k_idx = -1, v_idx = -1, mask = -1;
};

// Everything the builder reads about one layer (it reads a layer through these alone): two layers with equal traits
// get the same tensors, which is what lets a run of alike layers be cut out (see LayerCut).
struct LayerTraits {
  bool recurrent = false, mamba = false;
  bool sliding = false;    // attends over the sliding-window cache
  bool moe = false;        // routed experts (else a dense FFN)
  bool last = false;       // keeps only the output rows before its FFN
  bool kv_in_ram = false;  // its K and V views are copied into the compute buffer (op offload)
  int kv_heads = 0;
  LayerCache cache;
  std::vector<std::pair<std::string_view, Bytes>> host_weights;  // its matmul weights in RAM (op-offload copies)
  bool operator==(const LayerTraits&) const = default;
};

// Layers [from, to) left out of the graph: whole periods of a run of layers whose traits repeat every `period`
// layers, with kKeptBefore periods of the run kept before them and one after (ggml_graph::Cut's proof compares the
// last two before and the one after; the first may create the graph inputs the run reads).
struct LayerCut {
  static constexpr int kKeptBefore = 4, kMaxPeriod = 8;
  int from = 0, to = 0, period = 0;
  int left_out() const { return to - from; }
};

// The cuts leaving out the most layers, in layer order, each in periods of period_factor times its run's period; the
// layers each one keeps around it (the periods before it, the one after) are no other cut's. A run [s, e + p) repeats
// with period p when layer i is layer i + p for i in [s, e).
std::vector<LayerCut> find_cuts(const std::vector<LayerTraits>& traits, int period_factor) {
  // each layer as the index of the first layer with its traits: the run search compares integers
  std::vector<int> layers(traits.size());
  std::vector<int> distinct;
  for (std::size_t il = 0; il < traits.size(); ++il) {
    auto same = std::find_if(distinct.begin(), distinct.end(), [&](int d) { return traits[static_cast<std::size_t>(d)] == traits[il]; });
    if (same == distinct.end()) same = distinct.insert(distinct.end(), static_cast<int>(il));
    layers[il] = *same;
  }
  const int n = static_cast<int>(layers.size());
  constexpr int kept = LayerCut::kKeptBefore;
  std::vector<LayerCut> runs;
  for (int p = 1; p <= LayerCut::kMaxPeriod; ++p) {
    const int cut_period = p * period_factor;
    for (int s = 0, e = 0; s + p < n; s = e + 1) {
      for (e = s; e + p < n && layers[static_cast<std::size_t>(e)] == layers[static_cast<std::size_t>(e + p)];) ++e;
      const int left_out = ((e + p - s) / cut_period - kept - 1) * cut_period;
      if (left_out > 0) runs.push_back({s + kept * cut_period, s + kept * cut_period + left_out, cut_period});
    }
  }
  std::stable_sort(runs.begin(), runs.end(), [](const LayerCut& a, const LayerCut& b) { return a.left_out() > b.left_out(); });
  auto span = [](const LayerCut& c) { return std::pair{c.from - (kept - 1) * c.period, c.to + c.period}; };
  std::vector<LayerCut> out;
  for (const LayerCut& c : runs) {
    const std::pair<int, int> bounds = span(c);  // not a structured binding: clang < 16 cannot capture one
    const int lo = bounds.first, hi = bounds.second;
    if (std::none_of(out.begin(), out.end(), [&](const LayerCut& o) { return lo < span(o).second && span(o).first < hi; }))
      out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](const LayerCut& a, const LayerCut& b) { return a.from < b.from; });
  return out;
}

// Builds the graph in llama.cpp's node order; each method adds one block of a layer and returns its output.
class Builder {
  HostCopies* copies_;  // where the host matrices' copies went (nullptr: not asked)

 public:
  Builder(const ModelSpec& m, const EngineSpec& engine, const EngineSpec::ArchRule& arch, const ContextShape& s,
          const GgmlType& type_k, const GgmlType& type_v, bool flash_attn, const GraphTarget& target, int cut,
          HostCopies* copies)
      : copies_(copies), m_(m), arch_(arch), type_k_(type_k), type_v_(type_v), fa_(flash_attn), rotate_(engine.rule_holds("kv_rotation")),
        mask_f16_(engine.rule_holds("kq_mask_f16")), embd_select_(engine.rule_holds("embd_input_select")),
        glu_op_(engine.rule_holds("glu_op")), set_rows_(engine.rule_holds("kv_set_rows")),
        moe_batched_(engine.rule_holds("moe_batched")), target_(target), cut_(cut),
        // graph_reserve: n_seq_max sequences, the tokens rounded up to a multiple of them
        n_seqs_(std::max(1, s.n_seq)), ub_((s.n_ubatch + n_seqs_ - 1) / n_seqs_ * n_seqs_),
        ns_(std::max(1, s.n_stream)), e_(m.embd), n_out_(s.n_outputs > 0 ? std::min<std::int64_t>(s.n_outputs, ub_) : ub_) {
    if (target.host.weights && target.inputs == GraphInputs::copied) {
      by_layer_.resize(static_cast<std::size_t>(std::max(0, m.layers)) + 1);
      for (const auto& w : *target.host.weights)
        if (w.il >= 0 && w.il <= m.layers) by_layer_[static_cast<std::size_t>(w.il)].push_back({&w, false});
        else if (w.il == HostWeight::kEveryLayer) every_layer_.push_back({&w, false});
    }
    caches_[0].n_kv = s.n_ctx_seq;
    caches_[1].n_kv = s.swa_cells;
    caches_[0].head_k = m.head_dim_k, caches_[0].head_v = m.head_dim_v;
    caches_[1].head_k = m.head_dim_k_swa > 0 ? m.head_dim_k_swa : m.head_dim_k;
    caches_[1].head_v = m.head_dim_v_swa > 0 ? m.head_dim_v_swa : m.head_dim_v;
    swa_ = s.swa_cells > 0;
    traits_ = target.layers ? layer_traits(*target.layers) : layer_traits(layer_caches(m, engine));
  }

  std::optional<Graph> build() {
    // On a GPU the token rows are looked up on the CPU (token_embd stays in RAM: llama-model.cpp dev_input) from inputs
    // kept there; a device that cannot read host memory gets a copy of the rows as an input of its split (pass 5),
    // which is also what a later device of a layer split receives from the one before.
    const bool gpu = target_.inputs != GraphInputs::in_buffer;
    const std::vector<LayerCut> cuts = cut_ > 0 ? find_cuts(traits_, cut_) : std::vector<LayerCut>{};
    int built_layers = static_cast<int>(traits_.size());  // the layers a cut leaves out are never built
    for (const LayerCut& c : cuts) built_layers -= c.left_out();
    g_.reserve(static_cast<std::size_t>(std::max(0, built_layers)) * 96 + 64);  // about 60-90 tensors a layer
    const int tokens = input(Type::i32, {ub_, 1, 1, 1});
    if (gpu) g_.mark_host(tokens);
    // inp_embd: built beside inp_tokens, unused, never freed (llm_graph_input_embd; build rule embd_input_select)
    if (embd_select_) g_.mark_host_if(gpu, input(Type::f32, {e_, ub_, 1, 1}));
    int cur = -1;
    if (target_.inputs == GraphInputs::copied) {
      g_.host_leaf(Type::f32, {e_, ub_, 1, 1});  // GET_ROWS token_embd on the CPU
      cur = g_.node_copy(Type::f32, {e_, ub_, 1, 1});  // its copy in the device buffer
    } else {
      cur = g_.op(Type::f32, {e_, ub_, 1, 1}, {tokens});  // GET_ROWS token_embd
      if (gpu) g_.mark_host(cur);
    }
    // ggml_build_forward_expand adds a node when something expanded needs it: a layer's last nodes (after its
    // last explicit expand: SET_ROWS into the cache, the recurrent state copies) join the graph only when the next
    // layer's first expand pulls them in, after that layer's state gathers (build_rs expands them first).
    std::function<int()> rest;  // the previous layer's remaining nodes; returns its output
    std::vector<int> starts(traits_.size() + 1, -1);  // each built layer's first tensor
    auto next_cut = cuts.begin();
    for (int il = 0; il < static_cast<int>(traits_.size()); ++il) {
      if (next_cut != cuts.end() && il == next_cut->from) il = (next_cut++)->to;
      starts[static_cast<std::size_t>(il)] = static_cast<int>(g_.tensors().size());
      const LayerTraits& layer = traits_[static_cast<std::size_t>(il)];
      if (!layer.recurrent && layer.kv_heads <= 0) return std::nullopt;
      const LayerCache& lc = layer.cache;
      const bool recurrent = layer.recurrent, mamba = layer.mamba;
      const int conv_states = mamba ? gather_states(lc.r_width) : -1;
      if (rest) cur = rest();
      const int inp_sa = cur;
      const int normed = norm(cur);  // attn_norm
      std::function<int()> block;  // the rest of the mixing block: its output before the residual ADD
      if (recurrent && !mamba) {
        const int out = gated_delta_net(lc, normed);
        block = [out] { return out; };
      } else if (mamba) {
        block = mamba2(normed, conv_states);
      } else if (m_.mla) {
        const int kqv = latent_attention(normed);
        block = [this, il, kqv] { return matmul({e_, ub_, 1, 1}, {kqv}, il, "attn_output", ub_); };  // wo
      } else {
        block = attention(il, normed);
      }
      rest = [this, il, block, inp_sa] { return feed_forward(il, block(), inp_sa); };
    }
    cur = rest();
    for (const LayerCut& cut : cuts) record_cut(cut, starts);
    if (target_.holds_output) {  // else another device of a layer split holds the logits
      int result_norm = norm(cur);
      if (arch_.outputs_after_norm) result_norm = g_.op(Type::f32, {e_, n_out_, 1, 1}, {result_norm, output_ids()});
      g_.mark_output(result_norm);
      g_.mark_output(matmul({m_.vocab, n_out_, 1, 1}, {result_norm}, m_.layers, "output", n_out_));
    }
    // a host weight of a matmul this graph does not name (a fused or an MLA projection): its copy at the peak
    auto unplaced = [&](const HostWeight* w) {
      g_.add_unplaced(w->bytes);
      if (copies_) copies_->unplaced.push_back(weight_index(w));
    };
    for (const auto& layer : by_layer_)
      for (const auto& [w, seen] : layer)
        if (!seen) unplaced(w);
    for (const auto& [w, seen] : every_layer_)
      if (!seen) unplaced(w);
    return std::move(g_);
  }

 private:
  // NextN/MTP blocks run in a draft context of their own, never in the main graph (src/models/qwen35.cpp)
  std::vector<LayerTraits> layer_traits(const std::vector<LayerCache>& caches) const {
    std::vector<LayerTraits> out(static_cast<std::size_t>(std::max(0, m_.layers - m_.mtp_layers)));
    for (int il = 0; il < static_cast<int>(out.size()); ++il) {
      LayerTraits& t = out[static_cast<std::size_t>(il)];
      t.recurrent = m_.is_recurrent(il);
      t.mamba = t.recurrent && m_.recurrent->kind == "mamba2";
      t.sliding = m_.is_sliding(il) && swa_;
      t.moe = m_.is_moe_layer(il);
      t.last = il + 1 == static_cast<int>(out.size());
      t.kv_in_ram = target_.inputs == GraphInputs::copied && il < target_.host.kv_layers;
      t.kv_heads = m_.kv_heads_at(il);
      t.cache = caches.at(static_cast<std::size_t>(il));
      if (static_cast<std::size_t>(il) < by_layer_.size())
        for (const auto& copy : by_layer_[static_cast<std::size_t>(il)]) t.host_weights.emplace_back(copy.weight->base, copy.weight->bytes);
    }
    return out;
  }
  const LayerTraits& traits(int il) const { return traits_.at(static_cast<std::size_t>(il)); }
  // The cut's kept periods for the proof; a left-out layer's host weights count as read where its counterpart's are.
  void record_cut(const LayerCut& cut, const std::vector<int>& starts) {
    auto start = [&](int il) { return starts.at(static_cast<std::size_t>(il)); };
    const int p = cut.period;
    g_.add_cut({start(cut.from - 3 * p), start(cut.from - 2 * p), start(cut.from - p), start(cut.to), start(cut.to + p)});
    for (int il = cut.from; il < cut.to && static_cast<std::size_t>(il) < by_layer_.size(); ++il) {
      const auto& kept = by_layer_[static_cast<std::size_t>(cut.from - p + (il - cut.from) % p)];
      auto& left_out = by_layer_[static_cast<std::size_t>(il)];
      for (std::size_t k = 0; k < left_out.size(); ++k) left_out[k].seen = kept.at(k).seen;
    }
  }
  int norm(int t) { return g_.inplace({g_.inplace({t})}); }  // RMS_NORM, MUL by the weight
  // A MUL_MAT / MUL_MAT_ID (f32 result) of layer il's weight `base` over `rows` tokens. With op offload a weight in host
  // RAM is used by the device at a batch of >= 32 rows (ggml-backend.cpp ggml_backend_sched_backend_id_from_cur, "1.off"):
  // such a matmul starts a split of its own ("check if a weight is on a different and incompatible backend") whose
  // input, the weight's copy, is allocated at the split's start (pass 5 and the graph copy's "input_cpy" nodes) and
  // freed after the matmul, so it competes with the rest of the graph's peak instead of adding to it. Norm weights
  // and biases are copied the same way; at n_embd floats they are left out.
  int matmul(std::array<std::int64_t, 4> ne, ggml_graph::Srcs srcs, int il, std::string_view base, std::int64_t rows) {
    auto copy = [&](std::vector<Copy>& copies) {
      for (auto& [w, seen] : copies) {
        if (w->base != base) continue;
        seen = true;
        if (rows >= kOpOffloadMinBatch) {
          srcs.push_back(g_.op(Type::i8, {w->bytes, 1, 1, 1}, {}));
          if (copies_) copies_->tensors.push_back({srcs.at(srcs.size() - 1), weight_index(w)});
        }
        return true;
      }
      return false;
    };
    if (il >= 0 && static_cast<std::size_t>(il) < by_layer_.size() && !copy(by_layer_[static_cast<std::size_t>(il)]) && il < m_.layers)
      copy(every_layer_);
    return g_.op(Type::f32, ne, std::move(srcs));
  }
  // A graph input (ggml_set_input). The scheduler keeps every input on the CPU backend ("1.inp"); a device that
  // reads host memory in place (Metal's shared buffers) uses it there, others read a copy in their compute buffer,
  // which is what the tensor stands for in the device's graph.
  int input(Type type, std::array<std::int64_t, 4> ne) {
    const int t = g_.input(type, ne);
    if (target_.inputs == GraphInputs::read_in_place) g_.mark_host(t);
    return t;
  }
  int output_ids() {
    if (out_ids_ < 0) out_ids_ = input(Type::i32, {n_out_, 1, 1, 1});
    return out_ids_;
  }
  int rope(int t, CacheInputs& c, int nrot_k) {
    if (pos_ < 0) {
      if (nrot_k > 0 && c.rot_k < 0) c.rot_k = input(Type::f32, {nrot_k, nrot_k, 1, 1});  // met first, in Q's rotation
      pos_ = input(Type::i32, {ub_, 1, 1, 1});
    }
    return g_.inplace({t, pos_});
  }
  // Hadamard rotation (llama-graph.cpp build_attn with the cache's attn_rot_k / attn_rot_v): a MUL_MAT of the
  // reshaped rows by the nrot x nrot input.
  int rotated(int t, int& rot, std::int64_t n, std::array<std::int64_t, 4> shape) {
    if (rot < 0) rot = input(Type::f32, {n, n, 1, 1});
    const std::int64_t rows = shape[0] * shape[1] * shape[2] * shape[3] / n;
    return g_.view(g_.op(Type::f32, {n, rows, 1, 1}, {rot, g_.view(t, {n, rows, 1, 1})}), shape);
  }
  // A write of t into the cache: SET_ROWS with i64 row indices (llama-kv-cache.cpp build_input_k_idxs /
  // build_input_v_idxs), an input created on first use; a build before SET_ROWS (build rule kv_set_rows) has no
  // index: its write is a ggml_cpy into a view of the cache.
  void write_cache(int t, int& idx, std::int64_t n) {
    if (!set_rows_) {
      g_.external({t});
      return;
    }
    if (idx < 0) idx = input(Type::i64, {n, 1, 1, 1});
    g_.external({t, idx});
  }
  // The KQ mask: f16 with flash attention since PR #23764 (build rule kq_mask_f16; llama-graph.cpp
  // build_attn_inp_kv: cparams.flash_attn ? GGML_TYPE_F16 : GGML_TYPE_F32); before it an f32 input that FA read
  // through a ggml_cast to f16, a node on the device live through every layer.
  void require_mask(CacheInputs& c) {
    if (c.mask >= 0) return;
    const std::array<std::int64_t, 4> ne{c.n_kv, ub_ / ns_, 1, ns_};
    c.mask = input(fa_ && mask_f16_ ? Type::f16 : Type::f32, ne);
    if (fa_ && !mask_f16_) c.mask = g_.op(Type::f16, ne, {c.mask});
  }
  // CUDA/ROCm flash attention at a reserve's ubatch runs the tile or MMA kernel, which needs f16 K and V: the FA
  // node's allocation holds f16 copies of K and V views of another type, each 128-aligned, V sharing K's when it is
  // a view of K (ggml-cuda/fattn.cu ggml_cuda_flash_attn_ext_get_alloc_size, fattn-common.cuh get_f16_extra_data).
  void add_f16_scratch(int fa_node, std::int64_t k_elems, std::int64_t v_elems) {
    if (!target_.fa_f16_scratch) return;
    auto pad = [](std::int64_t n) { return (n + 127) / 128 * 128; };
    const std::int64_t base = g_.at(fa_node).bytes();
    std::int64_t end = base;
    if (type_k_.name != "f16" && type_k_.name != "f32") end = pad(end) + 2 * k_elems;
    if (v_elems > 0 && type_v_.name != "f16" && type_v_.name != "f32") end = pad(end) + 2 * v_elems;
    g_.add_extra(fa_node, end - base);
  }

  // Attention over a K/V cache (llama-graph.cpp build_attn, build_attn_mha): the projections and the cache writes
  // now; the attention itself and wo when the returned function runs (it returns wo's output).
  std::function<int()> attention(int il, int normed) {
    CacheInputs& c = caches_[traits(il).sliding ? 1 : 0];
    const std::int64_t kvh = traits(il).kv_heads, hk = c.head_k, hv = c.head_v, heads = m_.heads;
    const int nrot_k = rotate_ && type_k_.quantized() && m_.head_dim_k % 64 == 0 ? kv_rotation_size(static_cast<int>(hk)) : 0;
    const bool rot_v = rotate_ && type_v_.quantized() && m_.head_dim_v % 64 == 0;
    const std::array<std::int64_t, 4> q_shape{hk, heads, ub_, 1}, k_shape{hk, kvh, ub_, 1}, v_shape{hv, kvh, ub_, 1};
    auto project = [&](std::int64_t width, std::string_view name) { return matmul({width, ub_, 1, 1}, {normed}, il, name, ub_); };
    auto head_norm = [&](int t) { return m_.qk_norm ? norm(t) : t; };
    // A gated query (Qwen3-Next): wq yields the query and an output gate, side by side per head.
    const int q_full = project(hk * heads * (arch_.gated_query ? 2 : 1), "attn_q");
    auto positions = [&](int t) { return m_.rope ? rope(t, c, nrot_k) : t; };
    int q = positions(head_norm(g_.view(q_full, q_shape)));
    if (nrot_k > 0) q = rotated(q, c.rot_k, nrot_k, q_shape);
    auto make_k = [&] {
      const int k = positions(head_norm(g_.view(project(hk * kvh, "attn_k"), k_shape)));
      return nrot_k > 0 ? rotated(k, c.rot_k, nrot_k, k_shape) : k;
    };
    auto make_v = [&] {
      const int v = g_.view(project(hv * kvh, "attn_v"), v_shape);
      return rot_v ? rotated(v, c.rot_v, 64, v_shape) : v;
    };
    int k = -1, v = -1;
    if (arch_.graph == "qkv") k = make_k(), v = make_v();
    else v = make_v(), k = make_k();  // "qvk": V's projection before K's

    // llama_kv_cache::cpy_k / cpy_v: SET_ROWS into the cache; without flash attention V is stored transposed and
    // indexed per element.
    write_cache(g_.view(k, k_shape), c.k_idx, ub_);
    write_cache(g_.view(v, v_shape), c.v_idx, fa_ ? ub_ : ub_ * hv * kvh);
    // A cache in RAM is written by the CPU (the write's destination is a host buffer: "1.dst"), which reads copies of
    // the K and V rows the device computed, both in the host buffer during that split.
    if (target_.inputs == GraphInputs::copied && il < target_.host.kv_layers)
      g_.host_rows((hk + hv) * kvh * ub_ * 4);  // f32 rows; each a multiple of the 32-byte alignment at any ubatch
    require_mask(c);
    return [this, &c, il, q, q_full, q_shape, hk, hv, kvh, heads, rot_v] {
    const int q_perm = g_.view(q, {hk, ub_, heads, 1});
    // A layer whose KV cache is in RAM (op offload runs its attention on the device): the K and V views are inputs of
    // the device split after the CPU's SET_ROWS, copied into the compute buffer at its start (pass 5) and live until
    // their last reader.
    int k_copy = -1, v_copy = -1;
    if (traits(il).kv_in_ram) {
      k_copy = g_.op(Type::i8, {type_k_.row_size(hk * kvh) * c.n_kv * ns_, 1, 1, 1}, {});
      v_copy = g_.op(Type::i8, {type_v_.row_size(hv * kvh) * c.n_kv * ns_, 1, 1, 1}, {});
    }
    auto reading = [](ggml_graph::Srcs srcs, int copy) {
      if (copy >= 0) srcs.push_back(copy);
      return srcs;
    };
    int kqv = -1;
    if (fa_) {
      ggml_graph::Srcs srcs = reading(reading({q_perm}, k_copy), v_copy);
      // an f32 cache is cast to f16 for ggml_flash_attn_ext (llama-graph.cpp build_attn_mha)
      if (type_k_.name == "f32") srcs.push_back(g_.op(Type::f16, {hk * kvh * c.n_kv, ns_, 1, 1}, {}));
      if (type_v_.name == "f32") srcs.push_back(g_.op(Type::f16, {hv * kvh * c.n_kv, ns_, 1, 1}, {}));
      srcs.push_back(c.mask);
      const int fa = g_.op(Type::f32, {hv, heads, ub_, 1}, srcs);
      add_f16_scratch(fa, hk * kvh * c.n_kv * ns_, hv * kvh * c.n_kv * ns_);
      kqv = g_.view(fa, {hv * heads, ub_, 1, 1});
    } else {
      const int kq = g_.op(Type::f32, {c.n_kv, ub_ / ns_, heads, ns_}, reading({q_perm}, k_copy));
      const int probs = g_.inplace({kq, c.mask});  // SOFT_MAX (ext: scale, mask, sinks)
      const int out = g_.op(Type::f32, {hv, ub_ / ns_, heads, ns_}, reading({probs}, v_copy));
      kqv = g_.op(Type::f32, {hv * heads, ub_, 1, 1}, {g_.view(out, {hv, heads, ub_, 1})});  // CONT of the permute
    }
    if (rot_v) kqv = g_.view(rotated(kqv, c.rot_v, 64, {hv, heads, ub_, 1}), {hv * heads, ub_, 1, 1});
    if (arch_.gated_query) {  // attention · sigmoid(gate): CONT of the gate view, sigmoid, MUL
      const int gate = g_.inplace({g_.op(Type::f32, {hv * heads, ub_, 1, 1}, {g_.view(q_full, q_shape)})});
      kqv = g_.inplace_as({hv * heads, ub_, 1, 1}, {kqv, gate});
    }
    return matmul({e_, ub_, 1, 1}, {kqv}, il, "attn_output", ub_);  // wo
    };
  }

  // Multi-head latent attention (src/models/deepseek2.cpp with the latent cache): the query's no-rope part is
  // absorbed into the latent space (wk_b), the cache row is the normalised latent plus the roped key part, V is a
  // view of K, and the latent output is expanded by wv_b. Returns the rows wo reads, n_head · v_head_dim per token.
  int latent_attention(int normed) {
    const Mla& a = *m_.mla;
    CacheInputs& c = caches_[0];
    const std::int64_t heads = m_.heads, kvl = a.kv_lora_rank, nr = a.rope_dim, nope = a.nope_dim, vh = a.v_head_dim;
    int x = normed;
    if (a.q_lora_rank > 0) x = norm(g_.op(Type::f32, {a.q_lora_rank, ub_, 1, 1}, {normed}));  // wq_a and its norm
    const int q = g_.op(Type::f32, {heads * (nope + nr), ub_, 1, 1}, {x});
    const int absorbed = g_.op(Type::f32, {kvl, ub_, heads, 1}, {g_.view(g_.view(q, {nope, heads, ub_, 1}), {nope, ub_, heads, 1})});
    const int q_pe = rope(g_.view(q, {nr, heads, ub_, 1}), c, 0);
    const int q_cur = g_.op(Type::f32, {kvl + nr, heads, ub_, 1}, {g_.view(absorbed, {kvl, heads, ub_, 1}), q_pe});  // CONCAT
    const int kv = g_.op(Type::f32, {kvl + nr, ub_, 1, 1}, {normed});                                                // wkv_a
    const int latent = g_.view(norm(g_.view(kv, {kvl, ub_, 1, 1})), {kvl, 1, ub_, 1});
    const int k_pe = rope(g_.view(kv, {nr, 1, ub_, 1}), c, 0);
    const int k_cur = g_.op(Type::f32, {kvl + nr, 1, ub_, 1}, {latent, k_pe});  // CONCAT
    write_cache(g_.view(k_cur, {kvl + nr, 1, ub_, 1}), c.k_idx, ub_);
    require_mask(c);
    const int q_perm = g_.view(q_cur, {kvl + nr, ub_, heads, 1});
    int latent_out = -1;  // [kv_lora_rank, ub, heads]
    if (fa_) {
      ggml_graph::Srcs srcs{q_perm};
      if (type_k_.name == "f32") {  // cast to f16 for ggml_flash_attn_ext: K, and V's view of it
        srcs.push_back(g_.op(Type::f16, {(kvl + nr) * c.n_kv, ns_, 1, 1}, {}));
        srcs.push_back(g_.op(Type::f16, {kvl * c.n_kv, ns_, 1, 1}, {}));
      }
      srcs.push_back(c.mask);
      const int fa = g_.op(Type::f32, {kvl, heads, ub_, 1}, srcs);
      add_f16_scratch(fa, (kvl + nr) * c.n_kv * ns_, 0);  // V is a view of K: it shares K's copy
      latent_out = g_.view(fa, {kvl, ub_, heads, 1});
    } else {
      // V is not transposed in the cache: build_attn_mha makes a contiguous transposed copy in the cache type
      const int v_cont = g_.op(Type::i8, {type_k_.row_size(c.n_kv) * kvl * ns_, 1, 1, 1}, {});
      const int probs = g_.inplace({g_.op(Type::f32, {c.n_kv, ub_ / ns_, heads, ns_}, {q_perm}), c.mask});
      latent_out = g_.op(Type::f32, {kvl, ub_ / ns_, heads, ns_}, {v_cont, probs});
    }
    const int expanded = g_.op(Type::f32, {vh, ub_, heads, 1}, {latent_out});                        // wv_b
    const int out = g_.op(Type::f32, {vh, heads, ub_, 1}, {g_.view(expanded, {vh, heads, ub_, 1})});  // CONT of the permute
    return g_.view(out, {vh * heads, ub_, 1, 1});
  }

  // A gated delta-net layer (src/models/qwen3next.cpp build_layer_attn_linear, fused GATED_DELTA_NET op): the conv
  // and delta states of the reserve's n_seqs sequences are gathered from the recurrent cache (build_rs), the mixed
  // q/k/v projection runs through the short convolution, q and k are L2-normalised (and repeated to the value
  // heads), the op writes the output and the new state in one tensor, and the output is normalised and gated by
  // silu(z). Assumes head_v_dim = head_k_dim (d_state), as Qwen3-Next has. Returns the layer's output (wo done).
  int gated_delta_net(const LayerCache& lc, int normed) {
    const Recurrent& r = *m_.recurrent;
    const std::int64_t hk = r.d_state, nk = r.n_group, hv = r.d_state, nv = r.d_inner / r.d_state;
    const std::int64_t channels = r.d_inner + 2 * nk * hk, taps = r.d_conv - 1, per_seq = ub_ / n_seqs_;
    const int conv_states = gather_states(lc.r_width);
    const int mixed = g_.op(Type::f32, {channels, ub_, 1, 1}, {normed});
    const int conv_in = g_.op(Type::f32, {taps + per_seq, channels, n_seqs_, 1},
                              {g_.view(conv_states, {taps, channels, n_seqs_, 1}), g_.view(mixed, {per_seq, channels, n_seqs_, 1})});
    g_.external({g_.view(conv_in, {taps, channels, n_seqs_, 1})});  // the last taps back into the cache
    const int state = gather_states(lc.s_width);
    const int conv = g_.inplace({g_.op(Type::f32, {channels, ub_, 1, 1}, {conv_in})});  // SSM_CONV, silu
    auto qk = [&](std::int64_t width) {
      const int normed_heads = g_.op(Type::f32, {width, nk, ub_, 1}, {g_.view(conv, {width, nk, ub_, 1})});  // L2_NORM
      if (nv == nk) return normed_heads;
      return g_.view(g_.op(Type::f32, {width, nk, nv / nk, ub_}, {g_.view(normed_heads, {width, 1, nk, ub_})}),
                     {width, nv, ub_, 1});  // REPEAT
    };
    const int q = qk(hk), k = qk(hk);
    const int v = g_.view(conv, {hv, nv, ub_, 1});
    const int ba = g_.op(Type::f32, {2 * nv, ub_, 1, 1}, {normed});
    auto cont_of_ba = [&] { return g_.op(Type::f32, {nv, ub_, 1, 1}, {g_.view(ba, {nv, ub_, 1, 1})}); };
    const int gate = g_.view(g_.inplace({g_.inplace({g_.inplace({cont_of_ba()})})}), {1, nv, ub_, 1});  // + dt bias, softplus, · A
    const int beta = g_.view(g_.inplace({cont_of_ba()}), {1, nv, ub_, 1});                              // sigmoid
    const int delta = g_.op(Type::f32, {hv * nv, ub_ + hk * n_seqs_, 1, 1},
                            {q, k, v, gate, beta, g_.view(state, {hk, hv, nv, n_seqs_})});  // GATED_DELTA_NET
    g_.external({g_.view(delta, {lc.s_width, n_seqs_, 1, 1})});  // the new state back into the cache
    const int out = norm(g_.view(delta, {hv, nv, ub_, 1}));
    const int z = g_.inplace({g_.view(g_.op(Type::f32, {hv * nv, ub_, 1, 1}, {normed}), {hv, nv, ub_, 1})});  // silu(z)
    const int gated = g_.inplace({out, z});
    // the projection is reshaped before the residual ADD, so that ADD writes into the residual input instead
    return g_.view(g_.op(Type::f32, {e_, ub_, 1, 1}, {g_.view(gated, {hv * nv, ub_, 1, 1})}), {e_, ub_, 1, 1});
  }

  // llm_graph_context::build_rs: the n_seqs sequences' states gathered from the recurrent cache (GET_ROWS by the
  // state-copy indices; n_rs = n_seq_max in the reserve, so no extra states are copied)
  int gather_states(std::int64_t width) {
    if (s_copy_ < 0) s_copy_ = input(Type::i32, {n_seqs_, 1, 1, 1});
    return g_.op(Type::f32, {width, n_seqs_, 1, 1}, {s_copy_});
  }

  // A Mamba-2 layer (src/models/graph-context-mamba.cpp build_mamba2_layer): in_proj to z, xBC and dt; the short
  // convolution over the gathered conv state and xBC; SSM_SCAN reading the SSM state from the cache, writing the
  // output and the new state in one tensor; then, when the returned function runs, y + x·D gated by silu(z), a
  // grouped RMS norm and out_proj (it returns the layer's output before the residual ADD).
  std::function<int()> mamba2(int normed, int conv_states) {
    const Recurrent& r = *m_.recurrent;
    const std::int64_t d_inner = r.d_inner, ng = std::max(1, r.n_group), ds = r.d_state;
    const std::int64_t nh = r.dt_rank > 0 ? r.dt_rank : d_inner / 64, hd = d_inner / nh;
    const std::int64_t channels = d_inner + 2 * ng * ds, taps = r.d_conv - 1, per_seq = ub_ / n_seqs_;
    const int zxbcdt = g_.op(Type::f32, {2 * d_inner + 2 * ng * ds + nh, ub_, 1, 1}, {normed});  // in_proj
    const int conv_in = g_.op(Type::f32, {taps + per_seq, channels, n_seqs_, 1},
                              {g_.view(conv_states, {taps, channels, n_seqs_, 1}), g_.view(zxbcdt, {per_seq, channels, n_seqs_, 1})});
    g_.external({g_.view(conv_in, {taps, channels, n_seqs_, 1})});  // the last taps back into the cache
    const int conv = g_.inplace({g_.inplace({g_.op(Type::f32, {channels, ub_, 1, 1}, {conv_in})})});  // SSM_CONV, + bias, silu
    const int x = g_.view(conv, {hd, nh, ub_, 1});
    const int dt = g_.inplace({g_.op(Type::f32, {nh, ub_, 1, 1}, {g_.view(zxbcdt, {nh, ub_, 1, 1})})});  // CONT, + dt_bias
    const int scan = g_.op(Type::f32, {d_inner * ub_ + ds * d_inner * n_seqs_, 1, 1, 1},
                           {x, dt, g_.view(conv, {ds, ng, ub_, 1}), g_.view(conv, {ds, ng, ub_, 1}), s_copy_});  // SSM_SCAN
    g_.external({g_.view(scan, {ds * d_inner, n_seqs_, 1, 1})});  // the new state back into the cache
    return [this, zxbcdt, x, scan, d_inner, ng, nh, hd] {
      const int z = g_.op(Type::f32, {hd, nh, ub_, 1}, {g_.view(zxbcdt, {hd, nh, ub_, 1})});  // CONT
      const int y = g_.inplace({g_.view(scan, {hd, nh, ub_, 1}), g_.inplace({x})});          // y + x·D
      const int gated = g_.op(Type::f32, {hd, nh, ub_, 1}, {z, y});                          // GLU (swiglu)
      const int normed_groups = norm(g_.view(gated, {d_inner / ng, ng, ub_, 1}));
      const int out = g_.view(g_.op(Type::f32, {e_, ub_, 1, 1}, {g_.view(normed_groups, {d_inner, ub_, 1, 1})}), {e_, ub_, 1, 1});
      return arch_.residual_scale ? g_.inplace({out}) : out;  // SCALE of the reshaped output: a new tensor
    };
  }

  // The residual around the attention block, the FFN (dense or mixture of experts) and the residual around it;
  // the last layer keeps only the output rows first (inp_out_ids). Returns l_out.
  int feed_forward(int il, int cur, int residual) {
    std::int64_t rows = ub_;
    if (traits(il).last && !arch_.outputs_after_norm) {
      rows = n_out_;
      cur = g_.op(Type::f32, {e_, rows, 1, 1}, {cur, output_ids()});
      residual = g_.op(Type::f32, {e_, rows, 1, 1}, {residual, output_ids()});
    }
    if (m_.post_norms) cur = norm(cur);
    const int ffn_inp = g_.inplace({cur, residual});
    if (m_.ff == 0 && !m_.moe) return ffn_inp;  // no FFN (Mamba-2)
    const int x = norm(ffn_inp);  // ffn_norm
    int ffn_out = -1;
    if (!traits(il).moe) {
      ffn_out = dense(m_.ff, x, rows, il, "");
    } else {
      ffn_out = experts(x, rows, il);
      if (m_.moe->shared_ff > 0) {  // shared experts: a dense FFN beside the routed ones, added to their sum
        int shared = dense(m_.moe->shared_ff, x, rows, il, "_shexp");
        if (arch_.shared_expert_gate) shared = g_.inplace({shared, g_.inplace({g_.op(Type::f32, {1, rows, 1, 1}, {x})})});
        ffn_out = g_.inplace({ffn_out, shared});
      }
    }
    if (m_.post_norms) ffn_out = norm(ffn_out);
    return g_.inplace_as({e_, rows, 1, 1}, {ffn_out, ffn_inp});
  }
  // gate, up, GLU, down; suffix "_shexp" for the shared experts' weights
  int dense(std::int64_t ff, int x, std::int64_t rows, int il, std::string_view suffix) {
    auto name = [&](std::string_view base) { return std::string(base).append(suffix); };
    const int gate = matmul({ff, rows, 1, 1}, {x}, il, name("ffn_gate"), rows);
    const int up = matmul({ff, rows, 1, 1}, {x}, il, name("ffn_up"), rows);
    const int act = glu(gate, up);
    return matmul({e_, rows, 1, 1}, {act}, il, name("ffn_down"), rows);
  }
  // The gated activation: a GLU op into a new tensor since PR #14158 (build rule glu_op: ggml_swiglu_split); before
  // it the activation ran in place on the gate and the MUL by up in place on that (llama-graph.cpp build_ffn).
  int glu(int gate, int up) {
    if (!glu_op_) return g_.inplace({g_.inplace({gate}), up});
    return g_.op(Type::f32, g_.at(gate).ne, {gate, up});
  }
  // llama-graph.cpp build_moe_ffn: router, top-k, weights, MUL_MAT_ID over the chosen experts, their weighted sum.
  int experts(int x, std::int64_t rows, int il) {
    const std::int64_t n_exp = m_.moe->experts, n_used = m_.moe->experts_used, ffe = m_.moe->expert_ff;
    const int logits = matmul({n_exp, rows, 1, 1}, {x}, il, "ffn_gate_inp", rows);
    const int probs = g_.inplace({logits});  // SOFT_MAX, SIGMOID, or the router bias ADD
    // DeepSeek-V3 style: experts are chosen on the probabilities plus a correction bias (a new tensor: the
    // probabilities stay in use for the weights)
    const int choice = arch_.moe_gating == "sigmoid_bias" ? g_.inplace({probs}) : probs;
    const int top = g_.view(g_.op(Type::i32, {n_exp, rows, 1, 1}, {choice}), {n_used, rows, 1, 1});  // ARGSORT, top-k view
    int weights = g_.op(Type::f32, {1, n_used, rows, 1}, {g_.view(probs, {1, n_exp, rows, 1}), top});
    if (arch_.moe_gating == "topk_softmax") {  // softmax over the chosen logits (gpt-oss)
      weights = g_.view(g_.inplace({g_.view(weights, {n_used, rows, 1, 1})}), {1, n_used, rows, 1});
    } else {  // probabilities normalised over the chosen experts
      const int flat = g_.view(weights, {n_used, rows, 1, 1});
      const int clamped = g_.op(Type::f32, {1, rows, 1, 1}, {g_.op(Type::f32, {1, rows, 1, 1}, {flat})});  // SUM_ROWS, CLAMP
      weights = g_.view(g_.inplace({flat, clamped}), {1, n_used, rows, 1});
      if (arch_.moe_gating == "sigmoid_bias") weights = g_.inplace({weights});  // SCALE by expert_weights_scale
    }
    if (!moe_batched_) return expert_loop(x, top, weights, rows, il);
    const int xs = g_.view(x, {e_, 1, rows, 1});
    const int gate = g_.inplace({matmul({ffe, n_used, rows, 1}, {xs, top}, il, "ffn_gate_exps", rows), top});  // + ADD_ID bias
    const int up = g_.inplace({matmul({ffe, n_used, rows, 1}, {xs, top}, il, "ffn_up_exps", rows), top});
    const int act = glu(gate, up);
    const int down = g_.inplace({matmul({e_, n_used, rows, 1}, {act, top}, il, "ffn_down_exps", rows), top});
    const int weighted = g_.inplace({down, weights});
    int sum = g_.view(weighted, {e_, rows, 1, 1});
    for (std::int64_t i = 1; i < n_used; ++i) sum = g_.inplace_as({e_, rows, 1, 1}, {sum, g_.view(weighted, {e_, rows, 1, 1})});
    return sum;
  }

  // Before the batched MUL_MAT_ID (build rule moe_batched): one MUL_MAT_ID per chosen expert slot, each an
  // [expert_ff, n_tokens] product, and the weighted outputs summed by ADDs (llama.cpp's build_llama MoE branch up to
  // April 2024: ggml_mul_mat_id(ctx0, ffn_up_exps, selected_experts, i, cur), silu of the gate, MUL by up, the down
  // product, MUL by the slot's weight, ADD into moe_out; PR #4406's ggml_mul_mat_id(ctx, as, ids, id, b)).
  int expert_loop(int x, int top, int weights, std::int64_t rows, int il) {
    const std::int64_t n_used = m_.moe->experts_used, ffe = m_.moe->expert_ff;
    int moe_out = -1;
    for (std::int64_t i = 0; i < n_used; ++i) {
      const int up = matmul({ffe, rows, 1, 1}, {x, top}, il, "ffn_up_exps", rows);
      const int gate = matmul({ffe, rows, 1, 1}, {x, top}, il, "ffn_gate_exps", rows);
      const int act = g_.inplace({up, g_.inplace({gate})});  // MUL(up, silu(gate)), both in place
      const int down = matmul({e_, rows, 1, 1}, {act, top}, il, "ffn_down_exps", rows);
      const int weighted = g_.inplace({down, g_.view(weights, {1, rows, 1, 1})});
      moe_out = i == 0 ? weighted : g_.inplace({moe_out, weighted});
    }
    return moe_out;
  }

  const ModelSpec& m_;
  const EngineSpec::ArchRule& arch_;
  const GgmlType &type_k_, &type_v_;
  const bool fa_, rotate_, mask_f16_, embd_select_, glu_op_, set_rows_, moe_batched_;
  const GraphTarget target_;
  const int cut_;  // > 0: leave out periods of this many times a run's period of alike layers
  const std::int64_t n_seqs_, ub_, ns_, e_, n_out_;
  bool swa_ = false;
  Graph g_;
  CacheInputs caches_[2];  // [0] full, [1] sliding
  int pos_ = -1, out_ids_ = -1, s_copy_ = -1;
  struct Copy {
    const HostWeight* weight;
    bool seen;  // a matmul of the graph reads it
  };
  int weight_index(const HostWeight* w) const { return static_cast<int>(w - target_.host.weights->data()); }
  std::vector<std::vector<Copy>> by_layer_;  // the host weights by layer (the output matrix last); empty: none
  std::vector<Copy> every_layer_;            // the host weights of every repeating layer (HostWeight::kEveryLayer)
  std::vector<LayerTraits> traits_;          // per layer of the main graph (MTP blocks left out)
};
}  // namespace

void with_copies(ggml_graph::Graph& g, const HostCopies& copies, const std::vector<HostWeight>& weights) {
  for (const auto& [tensor, w] : copies.tensors) g.resize_raw(tensor, weights.at(static_cast<std::size_t>(w)).bytes);
  g.clear_unplaced();
  for (int w : copies.unplaced) g.add_unplaced(weights.at(static_cast<std::size_t>(w)).bytes);
}

std::optional<ggml_graph::Graph> GraphReuse::graph(const ModelSpec& m, const EngineSpec& engine, const ContextShape& s,
                                                   const GgmlType& type_k, const GgmlType& type_v, bool flash_attn,
                                                   const GraphTarget& target, int cut) {
  const std::vector<HostWeight>* weights = target.host.weights;
  // Weights of every repeating layer or of the output only: a weight of one repeating layer is also in that layer's
  // traits, which decide the cuts (find_cuts).
  const bool reusable = weights && !weights->empty() && target.inputs == GraphInputs::copied &&
                        std::all_of(weights->begin(), weights->end(), [&](const HostWeight& w) {
                          return w.il == HostWeight::kEveryLayer || w.il == m.layers;
                        });
  if (!reusable) return reserve_graph(m, engine, s, type_k, type_v, flash_attn, target, cut);
  const std::array<const void*, 4> ptrs{&m, &engine, &type_k, &type_v};
  const std::array<std::int64_t, 14> dims{s.n_ctx, s.n_ctx_seq, s.n_stream, s.n_seq, s.unified ? 1 : 0, s.n_ubatch, s.n_batch,
                                          s.swa_cells, s.n_outputs, flash_attn ? 1 : 0, target.holds_output ? 1 : 0,
                                          target.fa_f16_scratch ? 1 : 0, target.host.kv_layers, cut};
  auto same_names = [&](const Entry& e) {
    if (e.names.size() != weights->size()) return false;
    for (std::size_t i = 0; i < e.names.size(); ++i)
      if (e.names[i].first != (*weights)[i].il || e.names[i].second != (*weights)[i].base) return false;
    return true;
  };
  for (const Entry& e : entries_)
    if (e.ptrs == ptrs && e.dims == dims && same_names(e)) {
      ggml_graph::Graph g = e.graph;
      with_copies(g, e.copies, *weights);
      return g;
    }
  HostCopies copies;
  auto g = reserve_graph(m, engine, s, type_k, type_v, flash_attn, target, cut, &copies);
  if (!g) return g;
  if (entries_.size() == kKept) entries_.erase(entries_.begin());
  Entry e{ptrs, dims, {}, *g, std::move(copies)};
  for (const HostWeight& w : *weights) e.names.emplace_back(w.il, w.base);
  entries_.push_back(std::move(e));
  return g;
}

std::optional<ggml_graph::Graph> reserve_graph(const ModelSpec& m, const EngineSpec& engine, const ContextShape& s,
                                               const GgmlType& type_k, const GgmlType& type_v, bool flash_attn,
                                               const GraphTarget& target, int cut, HostCopies* copies) {
  const EngineSpec::ArchRule* arch = engine.arch(m.arch);
  if (!arch || arch->graph.empty() || m.shared_kv_from > 0 || m.layers <= 0) return std::nullopt;
  if (m.recurrent) {
    // Only the kinds modelled, with sizes the graph can be cut into (a --data entry may leave them out); anything
    // else keeps the closed forms rather than divide by zero.
    const Recurrent& r = *m.recurrent;
    if ((r.kind != "gdn" && r.kind != "mamba2") || r.d_conv <= 0 || r.d_inner <= 0 || r.d_state <= 0) return std::nullopt;
    if (r.kind == "gdn" && (r.n_group <= 0 || r.d_inner % r.d_state != 0 || (r.d_inner / r.d_state) % r.n_group != 0))
      return std::nullopt;
    const int heads = r.dt_rank > 0 ? r.dt_rank : r.d_inner / 64;
    if (r.kind == "mamba2" && (heads <= 0 || r.d_inner % heads != 0 || r.d_inner % std::max(1, r.n_group) != 0))
      return std::nullopt;
  }
  if (m.mla && m.mla->legacy) return std::nullopt;
  // b10454 rotates an MLA cache whose 576-wide rows are a multiple of 64; no measured graph covers it yet.
  if (m.mla && engine.rule_holds("kv_rotation") && type_k.quantized() && (m.mla->kv_lora_rank + m.mla->rope_dim) % 64 == 0)
    return std::nullopt;
  return Builder(m, engine, *arch, s, type_k, type_v, flash_attn, target, cut, copies).build();
}

}  // namespace kvplan

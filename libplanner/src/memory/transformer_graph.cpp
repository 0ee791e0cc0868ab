#include "transformer_graph.hpp"

#include <algorithm>

namespace kvplan {
namespace {
using ggml_graph::Graph;
using ggml_graph::Type;

// nrot of a quantized K cache (src/llama-kv-cache.cpp constructor attn_rot_k): the largest power of two
// dividing the head size, at least 64; 0 when the head size is not a multiple of 64.
int rotation_size(int head) {
  if (head <= 0 || head % 64 != 0) return 0;
  int n = 64;
  while (head % (n * 2) == 0) n *= 2;
  return n;
}

// The graph inputs of one KV cache (the full one, or the sliding-window one of an iSWA model), created on
// first use, which is the order ggml_build_forward_expand meets them in.
struct CacheInputs {
  std::int64_t n_kv = 0;
  int head_k = 0, head_v = 0;
  int rot_k = -1, rot_v = -1, k_idx = -1, v_idx = -1, mask = -1;
};
// Multi-head latent attention (src/models/deepseek2.cpp with the latent cache): the query's no-rope part is absorbed
// into the latent space (wk_b), the cache row is the normalised latent plus the roped key part, V is a view of K,
// and the latent output is expanded by wv_b. Returns the attention output, n_head · v_head_dim rows per token.
template <typename Rope>
int mla_attention(Graph& g, const ModelSpec& m, CacheInputs& c, int normed, Rope&& rope, bool flash_attn,
                  const GgmlType& type_k, std::int64_t ub, std::int64_t ns) {
  const Mla& a = *m.mla;
  const std::int64_t heads = m.heads, kvl = a.kv_lora_rank, nr = a.rope_dim, nope = a.nope_dim, vh = a.v_head_dim;
  int x = normed;
  if (a.q_lora_rank > 0) x = g.inplace({g.inplace({g.op(Type::f32, {a.q_lora_rank, ub, 1, 1}, {normed})})});  // wq_a, norm
  const int q = g.op(Type::f32, {heads * (nope + nr), ub, 1, 1}, {x});
  const int absorbed = g.op(Type::f32, {kvl, ub, heads, 1}, {g.view(g.view(q, {nope, heads, ub, 1}), {nope, ub, heads, 1})});
  const int q_pe = rope(g.view(q, {nr, heads, ub, 1}));
  const int q_cur = g.op(Type::f32, {kvl + nr, heads, ub, 1}, {g.view(absorbed, {kvl, heads, ub, 1}), q_pe});  // CONCAT
  const int kv = g.op(Type::f32, {kvl + nr, ub, 1, 1}, {normed});                                              // wkv_a
  const int latent = g.view(g.inplace({g.inplace({g.view(kv, {kvl, ub, 1, 1})})}), {kvl, 1, ub, 1});            // norm
  const int k_pe = rope(g.view(kv, {nr, 1, ub, 1}));
  const int k_cur = g.op(Type::f32, {kvl + nr, 1, ub, 1}, {latent, k_pe});  // CONCAT
  if (c.k_idx < 0) c.k_idx = g.input(Type::i64, {ub, 1, 1, 1});
  g.external({g.view(k_cur, {kvl + nr, 1, ub, 1}), c.k_idx});
  if (c.mask < 0) c.mask = g.input(flash_attn ? Type::f16 : Type::f32, {c.n_kv, ub / ns, 1, ns});
  const int q_perm = g.view(q_cur, {kvl + nr, ub, heads, 1});
  int latent_out = -1;  // [kv_lora_rank, ub, heads]
  if (flash_attn) {
    std::vector<int> srcs{q_perm};
    if (type_k.name == "f32") {  // cast to f16 for ggml_flash_attn_ext: K, and V's view of it
      srcs.push_back(g.op(Type::f16, {(kvl + nr) * c.n_kv, ns, 1, 1}, {}));
      srcs.push_back(g.op(Type::f16, {kvl * c.n_kv, ns, 1, 1}, {}));
    }
    srcs.push_back(c.mask);
    latent_out = g.view(g.op(Type::f32, {kvl, heads, ub, 1}, srcs), {kvl, ub, heads, 1});
  } else {
    // V is not transposed in the cache: build_attn_mha makes a contiguous transposed copy in the cache type
    const int v_cont = g.op(Type::i8, {type_k.row_size(c.n_kv) * kvl * ns, 1, 1, 1}, {});
    const int probs = g.inplace({g.op(Type::f32, {c.n_kv, ub / ns, heads, ns}, {q_perm}), c.mask});
    latent_out = g.op(Type::f32, {kvl, ub / ns, heads, ns}, {v_cont, probs});
  }
  const int expanded = g.op(Type::f32, {vh, ub, heads, 1}, {latent_out});  // wv_b
  const int out = g.op(Type::f32, {vh, heads, ub, 1}, {g.view(expanded, {vh, heads, ub, 1})});  // CONT of the permute
  return g.view(out, {vh * heads, ub, 1, 1});
}

// A gated delta-net layer (src/models/qwen3next.cpp build_layer_attn_linear, fused GATED_DELTA_NET op): the conv
// and delta states of the reserve's n_seqs sequences are gathered from the recurrent cache (build_rs), the
// mixed q/k/v projection runs through the short convolution, q and k are L2-normalised (and repeated to the
// value heads), the op writes the output and the new state in one tensor, and the output is normalised and
// gated by silu(z). Assumes head_v_dim = head_k_dim (d_state), as Qwen3-Next has. Returns the layer output.
int gdn_layer(Graph& g, const ModelSpec& m, const LayerCache& lc, int normed, int s_copy, std::int64_t ub, std::int64_t n_seqs) {
  const Recurrent& r = *m.recurrent;
  const std::int64_t hk = r.d_state, nk = r.n_group, hv = r.d_state, nv = r.d_inner / r.d_state, e = m.embd;
  const std::int64_t channels = r.d_inner + 2 * nk * hk, taps = r.d_conv - 1, per_seq = ub / n_seqs;
  const int conv_states = g.op(Type::f32, {lc.r_width, n_seqs, 1, 1}, {s_copy});  // GET_ROWS of the conv cache
  const int mixed = g.op(Type::f32, {channels, ub, 1, 1}, {normed});
  const int conv_in = g.op(Type::f32, {taps + per_seq, channels, n_seqs, 1},
                           {g.view(conv_states, {taps, channels, n_seqs, 1}), g.view(mixed, {per_seq, channels, n_seqs, 1})});
  g.external({g.view(conv_in, {taps, channels, n_seqs, 1})});  // the last taps back into the cache
  const int state = g.op(Type::f32, {lc.s_width, n_seqs, 1, 1}, {s_copy});  // GET_ROWS of the delta state
  const int conv = g.inplace({g.op(Type::f32, {channels, ub, 1, 1}, {conv_in})});  // SSM_CONV, silu
  auto qk = [&](std::int64_t width) {
    const int normed_heads = g.op(Type::f32, {width, nk, ub, 1}, {g.view(conv, {width, nk, ub, 1})});  // L2_NORM
    if (nv == nk) return normed_heads;
    return g.view(g.op(Type::f32, {width, nk, nv / nk, ub}, {g.view(normed_heads, {width, 1, nk, ub})}), {width, nv, ub, 1});  // REPEAT
  };
  const int q = qk(hk), k = qk(hk);
  const int v = g.view(conv, {hv, nv, ub, 1});
  const int ba = g.op(Type::f32, {2 * nv, ub, 1, 1}, {normed});
  const int gate = g.view(g.inplace({g.inplace({g.inplace({g.op(Type::f32, {nv, ub, 1, 1}, {g.view(ba, {nv, ub, 1, 1})})})})}),
                          {1, nv, ub, 1});  // CONT a, + dt bias, softplus, · A
  const int beta = g.view(g.inplace({g.op(Type::f32, {nv, ub, 1, 1}, {g.view(ba, {nv, ub, 1, 1})})}), {1, nv, ub, 1});  // sigmoid
  const int delta = g.op(Type::f32, {hv * nv, ub + hk * n_seqs, 1, 1},
                         {q, k, v, gate, beta, g.view(state, {hk, hv, nv, n_seqs})});  // GATED_DELTA_NET
  g.external({g.view(delta, {lc.s_width, n_seqs, 1, 1})});  // the new state back into the cache
  const int out = g.inplace({g.inplace({g.view(delta, {hv, nv, ub, 1})})});  // RMS_NORM, MUL
  const int z = g.inplace({g.view(g.op(Type::f32, {hv * nv, ub, 1, 1}, {normed}), {hv, nv, ub, 1})});  // silu(z)
  const int gated = g.inplace({out, z});
  // the projection is reshaped before the residual ADD, so that ADD writes into the residual input instead
  return g.view(g.op(Type::f32, {e, ub, 1, 1}, {g.view(gated, {hv * nv, ub, 1, 1})}), {e, ub, 1, 1});
}
}  // namespace

std::optional<ggml_graph::Graph> reserve_graph(const ModelSpec& m, const EngineSpec& engine, const ContextShape& s,
                                               const GgmlType& type_k, const GgmlType& type_v, bool flash_attn) {
  const EngineSpec::ArchRule* arch = engine.arch(m.arch);
  if (!arch || arch->graph.empty() || m.shared_kv_from > 0 || m.layers <= 0) return std::nullopt;
  if (m.recurrent && m.recurrent->kind != "gdn") return std::nullopt;
  const bool mla = m.mla && !m.mla->legacy;
  if (m.mla && m.mla->legacy) return std::nullopt;
  // b10454 rotates an MLA cache whose 576-wide rows are a multiple of 64; no measured graph covers it yet.
  if (mla && engine.rule_holds("kv_rotation") && type_k.quantized() && (m.mla->kv_lora_rank + m.mla->rope_dim) % 64 == 0)
    return std::nullopt;
  const bool qkv_order = arch->graph == "qkv";  // else "qvk": V's projection before K's
  // graph_reserve: n_seq_max sequences, the tokens rounded up to a multiple of them
  const std::int64_t n_seqs = std::max(1, s.n_seq);
  const std::int64_t ub = (s.n_ubatch + n_seqs - 1) / n_seqs * n_seqs, e = m.embd, ns = std::max(1, s.n_stream);
  const std::vector<LayerCache> layers = layer_caches(m, engine);
  const std::int64_t n_out = s.n_outputs > 0 ? std::min<std::int64_t>(s.n_outputs, ub) : ub;
  const bool rotate = engine.rule_holds("kv_rotation");

  Graph g;
  const int tokens = g.input(Type::i32, {ub, 1, 1, 1});
  g.input(Type::f32, {e, ub, 1, 1});  // inp_embd: built beside inp_tokens, unused, never freed (llm_graph_input_embd)
  int pos = -1, out_ids = -1, s_copy = -1;
  CacheInputs caches[2];  // [0] full, [1] sliding
  caches[0].n_kv = s.n_ctx_seq;
  caches[1].n_kv = s.swa_cells;
  caches[0].head_k = m.head_dim_k, caches[0].head_v = m.head_dim_v;
  caches[1].head_k = m.head_dim_k_swa > 0 ? m.head_dim_k_swa : m.head_dim_k;
  caches[1].head_v = m.head_dim_v_swa > 0 ? m.head_dim_v_swa : m.head_dim_v;

  int cur = g.op(Type::f32, {e, ub, 1, 1}, {tokens});  // GET_ROWS token_embd
  for (int il = 0; il < m.layers; ++il) {
    const bool last = il == m.layers - 1 && !arch->outputs_after_norm;
    const bool sliding = m.is_sliding(il) && s.swa_cells > 0;
    const bool recurrent = m.is_recurrent(il);
    CacheInputs& c = caches[sliding ? 1 : 0];
    const std::int64_t kvh = m.kv_heads_at(il), hk = c.head_k, hv = c.head_v, heads = m.heads;
    if (kvh <= 0 && !recurrent) return std::nullopt;
    const int nrot_k = rotate && type_k.quantized() && m.head_dim_k % 64 == 0 ? rotation_size(static_cast<int>(hk)) : 0;
    const bool rot_v = rotate && type_v.quantized() && m.head_dim_v % 64 == 0;

    const int inp_sa = cur;
    const int normed = g.inplace({g.inplace({cur})});  // RMS_NORM, MUL attn_norm
    auto project = [&](std::int64_t width) { return g.op(Type::f32, {width, ub, 1, 1}, {normed}); };
    auto head_norm = [&](int t) { return m.qk_norm ? g.inplace({g.inplace({t})}) : t; };  // RMS_NORM, MUL
    auto rope = [&](int t) {
      if (pos < 0) {
        if (nrot_k > 0 && c.rot_k < 0) c.rot_k = g.input(Type::f32, {nrot_k, nrot_k, 1, 1});
        pos = g.input(Type::i32, {ub, 1, 1, 1});
      }
      return g.inplace({t, pos});
    };
    // Hadamard rotation (llama-graph.cpp build_attn with the cache's attn_rot_k / attn_rot_v): a MUL_MAT of
    // the reshaped rows by the nrot x nrot input.
    auto rotated = [&](int t, int& rot, std::int64_t n, std::array<std::int64_t, 4> shape) {
      if (rot < 0) rot = g.input(Type::f32, {n, n, 1, 1});
      const std::int64_t rows = shape[0] * shape[1] * shape[2] * shape[3] / n;
      const int r = g.op(Type::f32, {n, rows, 1, 1}, {rot, g.view(t, {n, rows, 1, 1})});
      return g.view(r, shape);
    };

    int kqv = -1;  // the attention output, n_head · head_v rows per token
    if (recurrent) {
      if (s_copy < 0) s_copy = g.input(Type::i32, {n_seqs, 1, 1, 1});  // the state copy indices (n_rs = n_seq_max)
      cur = gdn_layer(g, m, layers[static_cast<std::size_t>(il)], normed, s_copy, ub, n_seqs);
    } else if (mla) {
      kqv = mla_attention(g, m, c, normed, rope, flash_attn, type_k, ub, ns);
    } else {
    const std::array<std::int64_t, 4> q_shape{hk, heads, ub, 1}, k_shape{hk, kvh, ub, 1}, v_shape{hv, kvh, ub, 1};
    // A gated query (Qwen3-Next): wq yields the query and an output gate, side by side per head.
    const int q_full = project(hk * heads * (arch->gated_query ? 2 : 1));
    int q = rope(head_norm(g.view(q_full, q_shape)));
    if (nrot_k > 0) q = rotated(q, c.rot_k, nrot_k, q_shape);
    auto make_k = [&] {
      int k = rope(head_norm(g.view(project(hk * kvh), k_shape)));
      return nrot_k > 0 ? rotated(k, c.rot_k, nrot_k, k_shape) : k;
    };
    auto make_v = [&] {
      const int v = g.view(project(hv * kvh), v_shape);
      return rot_v ? rotated(v, c.rot_v, 64, v_shape) : v;
    };
    int k = -1, v = -1;
    if (qkv_order) k = make_k(), v = make_v();
    else v = make_v(), k = make_k();

    // llama_kv_cache::cpy_k / cpy_v: SET_ROWS into the cache; without flash attention V is stored
    // transposed and indexed per element.
    if (c.k_idx < 0) c.k_idx = g.input(Type::i64, {ub, 1, 1, 1});
    g.external({g.view(k, k_shape), c.k_idx});
    if (c.v_idx < 0) c.v_idx = g.input(Type::i64, {flash_attn ? ub : ub * hv * kvh, 1, 1, 1});
    g.external({g.view(v, v_shape), c.v_idx});
    if (c.mask < 0) c.mask = g.input(flash_attn ? Type::f16 : Type::f32, {c.n_kv, ub / ns, 1, ns});

    const int q_perm = g.view(q, {hk, ub, heads, 1});
    if (flash_attn) {
      std::vector<int> srcs{q_perm};
      // an f32 cache is cast to f16 for ggml_flash_attn_ext (llama-graph.cpp build_attn_mha)
      if (type_k.name == "f32") srcs.push_back(g.op(Type::f16, {hk * kvh * c.n_kv, ns, 1, 1}, {}));
      if (type_v.name == "f32") srcs.push_back(g.op(Type::f16, {hv * kvh * c.n_kv, ns, 1, 1}, {}));
      srcs.push_back(c.mask);
      kqv = g.view(g.op(Type::f32, {hv, heads, ub, 1}, srcs), {hv * heads, ub, 1, 1});
    } else {
      const int kq = g.op(Type::f32, {c.n_kv, ub / ns, heads, ns}, {q_perm});
      const int probs = g.inplace({kq, c.mask});  // SOFT_MAX (ext: scale, mask, sinks)
      const int out = g.op(Type::f32, {hv, ub / ns, heads, ns}, {probs});
      kqv = g.op(Type::f32, {hv * heads, ub, 1, 1}, {g.view(out, {hv, heads, ub, 1})});  // CONT of the permute
    }
    if (rot_v) kqv = g.view(rotated(kqv, c.rot_v, 64, {hv, heads, ub, 1}), {hv * heads, ub, 1, 1});
    if (arch->gated_query) {  // attention · sigmoid(gate): CONT of the gate view, sigmoid, MUL
      const int gate = g.inplace({g.op(Type::f32, {hv * heads, ub, 1, 1}, {g.view(q_full, q_shape)})});
      kqv = g.inplace_as({hv * heads, ub, 1, 1}, {kqv, gate});
    }
    }
    if (!recurrent) cur = g.op(Type::f32, {e, ub, 1, 1}, {kqv});  // wo

    int residual = inp_sa;
    const std::int64_t rows = last ? n_out : ub;
    if (last) {  // keep only the rows that produce outputs (inp_out_ids)
      if (out_ids < 0) out_ids = g.input(Type::i32, {n_out, 1, 1, 1});
      cur = g.op(Type::f32, {e, n_out, 1, 1}, {cur, out_ids});
      residual = g.op(Type::f32, {e, n_out, 1, 1}, {inp_sa, out_ids});
    }
    if (m.post_norms) cur = g.inplace({g.inplace({cur})});
    const int ffn_inp = g.inplace({cur, residual});
    const int x = g.inplace({g.inplace({ffn_inp})});  // RMS_NORM, MUL ffn_norm

    int ffn_out = -1;
    if (!m.moe || il < m.moe->dense_lead) {
      const int gate = g.op(Type::f32, {m.ff, rows, 1, 1}, {x});
      const int up = g.op(Type::f32, {m.ff, rows, 1, 1}, {x});
      const int act = g.op(Type::f32, {m.ff, rows, 1, 1}, {gate, up});  // GLU
      ffn_out = g.op(Type::f32, {e, rows, 1, 1}, {act});
    } else {
      // llama-graph.cpp build_moe_ffn: router, top-k, weights, MUL_MAT_ID over the chosen experts.
      const std::int64_t n_exp = m.moe->experts, n_used = m.moe->experts_used, ffe = m.moe->expert_ff;
      const int logits = g.op(Type::f32, {n_exp, rows, 1, 1}, {x});
      const int probs = g.inplace({logits});  // SOFT_MAX, SIGMOID, or the router bias ADD
      // DeepSeek-V3 style: experts are chosen on the probabilities plus a correction bias (a new tensor: the
      // probabilities stay in use for the weights)
      const int choice = arch->moe_gating == "sigmoid_bias" ? g.inplace({probs}) : probs;
      const int order = g.op(Type::i32, {n_exp, rows, 1, 1}, {choice});  // ARGSORT
      const int top = g.view(order, {n_used, rows, 1, 1});
      int weights = g.op(Type::f32, {1, n_used, rows, 1}, {g.view(probs, {1, n_exp, rows, 1}), top});
      if (arch->moe_gating == "topk_softmax") {  // softmax over the chosen logits (gpt-oss)
        weights = g.view(g.inplace({g.view(weights, {n_used, rows, 1, 1})}), {1, n_used, rows, 1});
      } else {  // probabilities normalised over the chosen experts
        const int flat = g.view(weights, {n_used, rows, 1, 1});
        const int sum = g.op(Type::f32, {1, rows, 1, 1}, {flat});
        const int clamped = g.op(Type::f32, {1, rows, 1, 1}, {sum});
        weights = g.view(g.inplace({flat, clamped}), {1, n_used, rows, 1});
        if (arch->moe_gating == "sigmoid_bias") weights = g.inplace({weights});  // SCALE by expert_weights_scale
      }
      const int xs = g.view(x, {e, 1, rows, 1});
      const int gate = g.inplace({g.op(Type::f32, {ffe, n_used, rows, 1}, {xs, top}), top});  // + ADD_ID bias
      const int up = g.inplace({g.op(Type::f32, {ffe, n_used, rows, 1}, {xs, top}), top});
      const int act = g.op(Type::f32, {ffe, n_used, rows, 1}, {gate, up});
      const int down = g.inplace({g.op(Type::f32, {e, n_used, rows, 1}, {act, top}), top});
      const int weighted = g.inplace({down, weights});
      ffn_out = g.view(weighted, {e, rows, 1, 1});
      for (std::int64_t i = 1; i < n_used; ++i) {
        const int slot = g.view(weighted, {e, rows, 1, 1});
        ffn_out = g.inplace_as({e, rows, 1, 1}, {ffn_out, slot});
      }
      if (m.moe->shared_ff > 0) {  // shared experts: a dense FFN beside the routed ones, added to their sum
        const int gate_sh = g.op(Type::f32, {m.moe->shared_ff, rows, 1, 1}, {x});
        const int up_sh = g.op(Type::f32, {m.moe->shared_ff, rows, 1, 1}, {x});
        const int act_sh = g.op(Type::f32, {m.moe->shared_ff, rows, 1, 1}, {gate_sh, up_sh});
        int shared = g.op(Type::f32, {e, rows, 1, 1}, {act_sh});
        if (arch->shared_expert_gate) shared = g.inplace({shared, g.inplace({g.op(Type::f32, {1, rows, 1, 1}, {x})})});
        ffn_out = g.inplace({ffn_out, shared});
      }
    }
    if (m.post_norms) ffn_out = g.inplace({g.inplace({ffn_out})});
    cur = g.inplace_as({e, rows, 1, 1}, {ffn_out, ffn_inp});  // l_out
  }
  int result_norm = g.inplace({g.inplace({cur})});
  if (arch->outputs_after_norm) {
    out_ids = g.input(Type::i32, {n_out, 1, 1, 1});
    result_norm = g.op(Type::f32, {e, n_out, 1, 1}, {result_norm, out_ids});
  }
  g.mark_output(result_norm);
  g.mark_output(g.op(Type::f32, {m.vocab, n_out, 1, 1}, {result_norm}));
  return g;
}

}  // namespace kvplan

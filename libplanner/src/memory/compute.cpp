#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string_view>

#include "kvplan/checked.hpp"
#include "kvplan/memory.hpp"
#include "memory/transformer_graph.hpp"

namespace kvplan {
namespace {
Figure estimate_with_error(double bytes, double rel_error) {
  return Figure::estimate(checked_bytes(bytes, "compute buffer"), checked_bytes(bytes * (1 + rel_error), "compute buffer"));
}

// Hadamard rotation of quantized caches (build rule kv_rotation; src/llama-kv-cache.cpp constructor
// attn_rot_k/attn_rot_v and build_input_k_rot/build_input_v_rot): every KV cache (an iSWA model has two)
// whose layers share one K head size gets an f32 nrot x nrot graph input, nrot the largest power of two
// dividing that head size (at least 64), when K is quantized and the model's head size is a multiple of 64;
// V gets a 64 x 64 input under the same rule (never for MLA, whose cache has no V head size). The inputs
// live for the whole graph, so they add to every phase (measured by tests/validation: qwen3-tiny q4_0/q4_0
// 81 920 B, gemma3-tiny 163 840 B over f16/f16).
double rotation_inputs(const ModelSpec& m, const EngineSpec& engine, const std::vector<LayerCache>& layers,
                       const GgmlType& type_k, const GgmlType& type_v) {
  if (!engine.rule_holds("kv_rotation") || !(type_k.quantized() || type_v.quantized())) return 0;
  const bool mla = m.mla && !m.mla->legacy;
  const int model_head_k = mla ? m.mla->kv_lora_rank + m.mla->rope_dim : m.head_dim_k;
  double bytes = 0;
  for (const LayerKind kind : {LayerKind::full, LayerKind::sliding}) {
    int head_k = 0, head_v = 0;  // 0: no layer in this cache; -1: layers differ (llama.cpp: n_embd_head_*_all)
    for (const auto& c : layers) {
      if (c.kind != kind) continue;
      head_k = head_k == 0 ? c.head_k : (head_k == c.head_k ? head_k : -1);
      if (!mla) head_v = head_v == 0 ? c.head_v : (head_v == c.head_v ? head_v : -1);
    }
    if (type_k.quantized() && head_k > 0 && model_head_k % 64 == 0) {
      const int nrot = kv_rotation_size(head_k);
      bytes += 4.0 * nrot * nrot;
    }
    if (type_v.quantized() && head_v > 0 && m.head_dim_v % 64 == 0) bytes += 4.0 * 64 * 64;
  }
  return bytes;
}

// DeepSeek Sparse Attention (deepseek32): the lightning indexer's rotation input, which the indexer cache always has
// (src/llama-kv-cache.cpp constructor: attn_rot_k forced on for the DSA indexer, whatever type_k), and its f32
// nrot x nrot size from the indexer key length (build_input_k_rot).
double indexer_rotation_input(const ModelSpec& m) {
  if (!m.mla || m.mla->indexer_key_length <= 0) return 0;
  const int nrot = kv_rotation_size(m.mla->indexer_key_length);
  return 4.0 * nrot * nrot;
}

// The indexer's live tensors while a layer attends (src/models/deepseek32.cpp, then llama-graph.cpp build_attn with
// top_k): per KV cell and ubatch token its f32 scores, freed once top-k has read them, then the MLA mask filled with
// -inf and its sum with the causal mask (each of the KQ mask's type) in their place; per token the top-k indices, their
// contiguous copy and the f32 zeros set_rows writes (min(top_k, n_kv) each). Where the backend lacks
// ggml_lightning_indexer (no GGML_OP_LIGHTNING_INDEXER in ggml-vulkan.cpp at b10454: llama-context.cpp's probe turns
// fused_lid off) the unfused path also keeps the per-head product indexer_kq and its permuted copy, f32 per indexer head.
// tests/validation deepseek32-tiny: 6.885 B per cell and token over deepseek2-tiny's buffer at 4096 cells, ubatch 512,
// flash attention on; this term with the f16 indexer mask below gives 6.75.
double indexer_bytes(const ModelSpec& m, const BackendSpec& backend, double mask_bytes, double n_kv, double ub) {
  if (!m.mla || m.mla->indexer_key_length <= 0) return 0;
  const bool fused = backend.id != "vulkan";
  const double per_cell = std::max(4.0, 2 * mask_bytes) + (fused ? 0 : 2.0 * 4 * m.mla->indexer_heads);
  const double top_k = std::min<double>(m.mla->indexer_top_k, n_kv);
  return n_kv * ub * per_cell + top_k * ub * 4 * 3;
}
// The indexer's own KQ mask, a graph input: f16 when the fused indexer runs, f32 otherwise (llama-graph.cpp
// build_attn_inp_k_dsa passes flash_attn = fused_lid to build_attn_inp_kq_mask).
double indexer_mask_bytes(const ModelSpec& m, const BackendSpec& backend) {
  if (!m.mla || m.mla->indexer_key_length <= 0) return 0;
  return backend.id != "vulkan" ? 2 : 4;
}
// How the scheduler places the reserve graph on this backend (transformer_graph.hpp GraphTarget); nullopt where
// kvplan has no graph placement for it (a CPU part of a split without the output keeps the closed forms).
std::optional<GraphTarget> graph_target(const BackendSpec& backend, bool holds_output, const HostResident& host) {
  if (backend.id == "cpu") return holds_output ? std::optional<GraphTarget>(GraphTarget{}) : std::nullopt;
  GraphTarget t;
  t.holds_output = holds_output;
  if (backend.id == "metal") {
    // Metal's device accepts host buffers (ggml-metal.cpp supports_buft on a shared-memory device), so host weights
    // are read in place too (no op-offload copies), and
    // ggml_backend_sched_buffer_supported makes no copy: inputs and the token rows stay in the CPU buffer.
    t.inputs = GraphInputs::read_in_place;
    return t;
  }
  if (backend.id != "cuda" && backend.id != "rocm" && backend.id != "vulkan" && backend.id != "sycl") return std::nullopt;
  t.inputs = GraphInputs::copied;
  t.host = host;
  t.fa_f16_scratch = backend.id == "cuda" || backend.id == "rocm";
  return t;
}

// The compute buffers from the reserve graph; nullopt where the graph has a cut whose repeat is not proven. On the CPU
// backend one buffer holds every graph tensor, inputs included. On a GPU, the device's placement peak and the host
// buffer's inputs; under pipeline parallelism every split input is kept n_copies times and never reused
// (ggml-backend.cpp pass 5). A cut graph has the whole graph's inputs and host tensors (proven_peak_bytes checks that
// no left-out layer has any).
std::optional<ComputeBytes> graph_compute(ggml_graph::Graph graph, const EngineSpec& engine, const BackendSpec& backend, int n_copies) {
  if (backend.id == "cpu") {
    const auto peak = ggml_graph::proven_peak_bytes(graph, backend.alignment);
    if (!peak) return std::nullopt;
    ComputeBytes out;
    out.device = estimate_with_error(static_cast<double>(*peak), backend.compute_rel_error);
    out.from_graph = true;
    return out;
  }
  double device = 0;
  if (n_copies > 1) {
    graph.keep_inputs();
    device = static_cast<double>(ggml_graph::input_bytes(graph, backend.alignment)) * (n_copies - 1);
  }
  const auto peak = ggml_graph::proven_peak_bytes(graph, backend.alignment);
  if (!peak) return std::nullopt;
  device += static_cast<double>(*peak + graph.unplaced());
  // the host buffer (CUDA_Host pinned memory, or the CPU buffer) has the CPU's alignment (TENSOR_ALIGNMENT)
  const double host = static_cast<double>(ggml_graph::host_bytes(graph, engine.backend("cpu").alignment, n_copies));
  ComputeBytes out;
  out.device = estimate_with_error(device, backend.compute_rel_error);
  out.host = estimate_with_error(host, backend.compute_rel_error);
  out.from_graph = true;
  return out;
}
}  // namespace

// llama.cpp measures the compute buffer by reserving the worst-case graph (src/llama-context.cpp
// llama_context::graph_reserve; ggml-alloc plans the peak). These closed forms follow that graph's
// largest live sets (docs/formulas.md §5.2; checked against CUDA logs in tests/unit/memory_test.cpp):
//   logits block   (n_vocab + n_embd) · n_ubatch · 4          result_output f32 and its input
//   attention, FA off   n_kv · n_ubatch · n_head · 4 + 6 · n_embd · n_ubatch · 4     KQ f32
//   attention, FA on    quantized K/V: f16 copies n_kv · (k_width + v_width) · 2 (ggml-cuda
//                       fattn-common.cuh, in the FA node's allocation since llama/23907)
//   FFN            2 · n_ff · n_ubatch · 4 (MoE: expert_ff · experts_used)
// Host (CUDA_Host): token_embd get_rows output n_embd · n_ubatch · 4 plus one KQ mask per cache.
std::array<std::int64_t, 3> compute_type_key(const GgmlType& t, bool row_sizes) {
  const std::string_view name = t.name;  // compared with the literals' lengths known (the planner asks at every probe)
  const std::int64_t kind = name == "f32" ? 1 : name == "f16" ? 2 : t.quantized() ? 3 : 4;
  return {kind, row_sizes ? t.block : 0, row_sizes ? t.bytes : 0};
}

bool compute_reads_row_sizes(const ModelSpec& m, bool flash_attn, int host_kv_layers) {
  // the graph's k_copy/v_copy (transformer_graph.cpp attention) and v_cont (latent_attention); the closed forms' v_cont
  return host_kv_layers > 0 || (!flash_attn && m.mla && !m.mla->legacy);
}

ComputeBytes compute_bytes(const ModelSpec& m, const EngineSpec& engine, const ContextShape& s, const GgmlType& type_k,
                           const GgmlType& type_v, bool flash_attn, const BackendSpec& backend, bool holds_output, int n_copies) {
  return compute_bytes(layer_caches(m, engine), m, engine, s, type_k, type_v, flash_attn, backend, holds_output, n_copies);
}

ComputeBytes compute_bytes(const std::vector<LayerCache>& layers, const ModelSpec& m, const EngineSpec& engine, const ContextShape& s,
                           const GgmlType& type_k, const GgmlType& type_v, bool flash_attn, const BackendSpec& backend,
                           bool holds_output, int n_copies, const HostResident& in_ram, int* cut_hint, GraphReuse* reuse) {
  // Where kvplan models the architecture's reserve graph node by node, its placement by ggml-alloc gives the
  // buffers: on the CPU backend one buffer holds every graph tensor, inputs included; on a GPU the scheduler keeps
  // the inputs in the host buffer and the device holds the rest (and copies of the inputs it reads).
  // The graph is built with its alike layers cut out first (the cost of a graph then does not grow with depth): by the
  // layers' period, then by twice it, then whole where neither cut's repeat is proven (over the catalog: Mamba-Codestral, whose free
  // blocks settle only after more layers than a cut keeps; tests/unit/memory_test.cpp counts them).
  // Every proven cut gives the whole graph's figures, so the order only decides the cost: a caller's hint (the cut
  // that last held for this model: hybrids hold only at twice the period) is tried first.
  if (auto target = graph_target(backend, holds_output, in_ram)) {
    target->layers = &layers;
    const bool twice_first = cut_hint && *cut_hint == 2;
    for (const int cut : {twice_first ? 2 : 1, twice_first ? 1 : 2, 0}) {
      auto graph = reuse ? reuse->graph(m, engine, s, type_k, type_v, flash_attn, *target, cut)
                         : reserve_graph(m, engine, s, type_k, type_v, flash_attn, *target, cut);
      if (!graph) break;
      if (auto out = graph_compute(std::move(*graph), engine, backend, n_copies)) {
        if (cut_hint && cut != 0) *cut_hint = cut;
        return *out;
      }
    }
  }
  // The closed forms below stay for what has no graph model: architectures without a modelled graph (legacy MLA,
  // shared-KV layers, ...), backends without a placement rule, and the CPU part of a split without the output.
  const double ub = s.n_ubatch;
  bool any_full = false;
  double widths = 0;  // the widest K + V row the attention reads; an MLA V-less cache's V is a view of
                      // K's first kv_lora_rank columns, copied separately (cast with FA, cont without)
  const double mla_v_view = m.mla && !m.mla->legacy ? m.mla->kv_lora_rank : 0;
  for (const auto& c : layers) {
    if (c.kind != LayerKind::full && c.kind != LayerKind::sliding) continue;
    any_full |= c.kind == LayerKind::full;
    widths = std::max(widths, static_cast<double>(c.k_width) + (c.v_width > 0 ? static_cast<double>(c.v_width) : mla_v_view));
  }
  // The reserve graph sees the full cache (init_full): the largest attention layer's cells.
  const double n_kv = any_full ? s.n_ctx_seq : (widths > 0 ? s.swa_cells : 0);
  // Rows live beside the attention product: four n_embd rows (input, norm, residual, output) and two
  // of the query width, which is n_head · head_dim (wider than n_embd in Qwen3/Gemma 3) or, for MLA
  // with the absorbed latent query, n_head · (kv_lora_rank + rope) (llama-model.cpp build_deepseek2).
  const double q_width = m.mla && !m.mla->legacy ? static_cast<double>(m.heads) * (m.mla->kv_lora_rank + m.mla->rope_dim)
                                                 : static_cast<double>(m.heads) * m.head_dim_k;
  // A gated query (Qwen3-Next: wq yields the query and an output gate) keeps a third query-wide row live.
  const EngineSpec::ArchRule* arch = engine.arch(m.arch);
  const double q_rows = arch && arch->gated_query ? 3.0 : 2.0;
  const double small = (4.0 * m.embd + q_rows * q_width) * ub * 4;
  // Gemma 3n (arch rules per_layer_input, altup; src/models/gemma3n.cpp build_inp_per_layer, project_per_layer_inputs):
  // the per-layer inputs, n_embd_altup · n_layer f32 per token, are live four times at the graph's start (the get_rows
  // rows, the per_layer_model_proj product, their sum and its permuted copy) beside one n_embd row; one copy then stays
  // live through every layer beside the n_altup AltUp streams and their predictions and corrections (4 · n_altup
  // n_embd rows). Measured on tests/validation gemma3n-tiny (CPU): 4 · P + n_embd + 12 floats per token with FA,
  // KQ + P + 15 · n_embd + 8 without (P = 256 · 22).
  // Gemma 4 E2B/E4B (src/models/gemma4.cpp build_inp_per_layer, project_per_layer_inputs) build the same per-layer
  // inputs from the file's embedding_length_per_layer_input (P = that width · n_layer) without AltUp; their permuted
  // copy, which every layer slices, stays live beside each layer's own tensors (ple_live). Measured on tests/validation
  // gemma4-e-tiny (P = 64 · 6) over gemma4-tiny: 2 · P + 1 floats per token with FA, P + n_embd + 1 without.
  const int per_layer_width = arch && arch->per_layer_input > 0 ? arch->per_layer_input : m.per_layer_embd;
  const double per_layer = static_cast<double>(per_layer_width) * m.layers;
  const double per_layer_start = per_layer > 0 ? (4 * per_layer + m.embd) * ub * 4 : 0;
  const bool altup_model = arch && arch->altup > 0;
  const double layer_live = std::max(small, altup_model ? (per_layer + 4.0 * arch->altup * m.embd) * ub * 4 : 0.0);
  const double ple_live = altup_model ? 0 : per_layer * ub * 4;
  // The reserve graph computes logits for min(n_tokens, n_outputs_max) rows (llama-context.cpp graph_reserve
  // callers): every ubatch token for a library context, n_parallel · (1 + n_draft) for llama-server.
  const double rows = s.n_outputs > 0 ? std::min<double>(s.n_outputs, ub) : ub;
  const double logits = holds_output ? (static_cast<double>(m.vocab) + m.embd) * rows * 4 : 0;
  double attention = 0;
  if (n_kv > 0 && flash_attn) {
    // f16 copies of the K/V views: quantized caches on CUDA/ROCm (above), and an f32 cache on every
    // backend (llama-graph.cpp build_attn_mha casts K and V to f16 for ggml_flash_attn_ext; measured
    // on the CPU backend by tests/validation).
    const bool cuda_like = backend.id == "cuda" || backend.id == "rocm";
    const bool f16_copies = (cuda_like && (type_k.quantized() || type_v.quantized())) || type_k.name == "f32" || type_v.name == "f32";
    // The copies cover the whole view the FA node reads: every stream of a non-unified cache.
    attention = layer_live + (f16_copies ? n_kv * s.n_stream * widths * 2 : 0);
  } else if (n_kv > 0) {
    // KQ in f32; an MLA V view is not transposed in the cache, so build_attn_mha makes a contiguous
    // transposed copy of it (measured on deepseek2 by tests/validation).
    const double v_cont = mla_v_view > 0 ? n_kv * s.n_stream * mla_v_view * (type_k.bytes / static_cast<double>(type_k.block)) : 0;
    attention = n_kv * ub * m.heads * 4 + layer_live + v_cont;
  }
  // The KQ mask: f16 with flash attention since PR #23764 (build rule kq_mask_f16), f32 otherwise (llama-graph.cpp;
  // the f16 slope of 2 bytes per cell and token measured by tests/validation).
  const double mask = flash_attn && engine.rule_holds("kq_mask_f16") ? 2 : 4;
  if (n_kv > 0) attention += indexer_bytes(m, backend, mask, n_kv, ub) + ple_live;
  const double ff = static_cast<double>(m.widest_ffn());
  const double ffn = (2 * ff + 6.0 * m.embd) * ub * 4 + ple_live;
  // Recurrent layers (Mamba2-style scan): per token the in_proj output, the conv input, the scan's x
  // and y and three n_embd rows, plus one layer's state copied per sequence; fitted to the
  // measured mamba2-tiny buffer of tests/validation (16.4 KB per ubatch token + 158 KB).
  double recurrent = 0;
  if (m.recurrent) {
    const Recurrent& r = *m.recurrent;
    const double d_inner = r.d_inner > 0 ? r.d_inner : m.embd;
    const double groups = 2.0 * r.n_group * r.d_state;
    // A parallel hybrid (src/models/falcon-h1.cpp) runs the Mamba-2 branch while the attention branch's output, one
    // n_embd row per token, waits to be added to it (tests/validation falcon-h1-tiny: without it the bound fell up to
    // 44 KB short at small contexts with several sequences).
    const double per_token = (2 * d_inner + groups + d_inner / 64) + (d_inner + groups) + 2 * d_inner + (r.parallel ? 4.0 : 3.0) * m.embd;
    double state = 0;
    for (const auto& c : layers) state = std::max(state, static_cast<double>(c.r_width + c.s_width));
    recurrent = ub * 4 * per_token + state * std::max(1, s.n_seq) * 4;
  }
  ComputeBytes out;
  const double peak = std::max({logits, attention, ffn, recurrent, per_layer_start}) + rotation_inputs(m, engine, layers, type_k, type_v) +
                      indexer_rotation_input(m);
  out.device = estimate_with_error(peak, backend.compute_rel_error);
  // The closed forms count whole rows live beside the peak's big tensor; which other rows ggml-alloc keeps
  // live depends on its reuse order, which they do not reproduce. Over the validation sweep the rows they miss
  // come to at most one query-wide row per ubatch token (gemma3-tiny without FA: +2 076 B per token at
  // q_width 512; Qwen3-Next's rotated query), so the upper bound adds that row.
  const double row = std::max(static_cast<double>(m.embd), static_cast<double>(m.heads) * m.head_dim_k);
  if (n_kv > 0) out.device.high = checked_add(out.device.high, checked_bytes(row * ub * 4, "compute buffer"), "compute buffer");
  double host = static_cast<double>(m.embd) * ub * 4 + n_kv * ub * (mask + indexer_mask_bytes(m, backend));
  if (any_full && s.swa_cells > 0) host += static_cast<double>(s.swa_cells) * ub * mask;
  out.host = estimate_with_error(host, backend.compute_rel_error);
  return out;
}

// src/llama-context.cpp llama_context::output_reserve: (n_vocab + n_embd·[embeddings]) · max(n_outputs,
// n_seq_max) · 4, allocated at construction with n_outputs = n_seq_max in the output device's host
// buffer type (pinned RAM). It grows to n_batch rows only if a batch asks for every logit.
Figure output_bytes(const ModelSpec& m, const ContextShape& s) {
  const Bytes b = checked_mul(checked_mul(m.vocab, std::max(1, s.n_seq), "vocabulary x sequences"), 4, "output buffer");
  return Figure::exact(b, b);
}

}  // namespace kvplan

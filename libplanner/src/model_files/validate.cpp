#include "model_files/validate.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "kvplan/error.hpp"

namespace kvplan::detail {
namespace {

// Limits well beyond any published model and small enough that every product the memory rules form of two
// or three of them fits 64 bits (the rest is checked arithmetic, kvplan/checked.hpp).
constexpr long long kMaxLayers = 4096;
constexpr long long kMaxWidth = 1 << 20;     // embedding, inner and rank widths
constexpr long long kMaxHeads = 1 << 14;     // heads and head sizes
constexpr long long kMaxFf = 1 << 22;        // feed-forward widths
constexpr long long kMaxVocab = 1 << 24;
constexpr long long kMaxCtx = 1 << 24;       // 16,777,216 tokens (Llama 4 Scout: 10,485,760)
constexpr long long kMaxExperts = 1 << 16;
constexpr double kMaxParams = 1e15;

class Checker {
 public:
  explicit Checker(const FieldError& fail) : fail_(fail) {}
  void range(const std::string& field, long long v, long long lo, long long hi) const {
    if (v < lo || v > hi) fail(field, std::to_string(v), "is out of range", fmt::format("{}..{}", lo, hi));
  }
  [[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& problem,
                         const std::string& accepted) const {
    fail_(field, value, problem, accepted);
    throw std::logic_error("check_model: the field error did not throw");  // FieldError must throw
  }

 private:
  const FieldError& fail_;
};

bool any_attention(const ModelSpec& m) {
  for (int il = 0; il < m.layers; ++il)
    if (!m.is_recurrent(il)) return true;
  return false;
}

}  // namespace

std::string printable(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return s;
}

void check_model(const ModelSpec& m, const FieldError& fail) {
  const Checker c(fail);
  c.range("layers", m.layers, 1, kMaxLayers);
  c.range("embd", m.embd, 1, kMaxWidth);
  c.range("heads", m.heads, 0, kMaxHeads);
  c.range("kv_heads", m.kv_heads, 0, m.heads > 0 ? m.heads : kMaxHeads);
  if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    c.fail("kv_heads", std::to_string(m.kv_heads), fmt::format("does not divide the {} attention heads", m.heads),
           fmt::format("a divisor of {}", m.heads));
  c.range("head_dim", m.head_dim_k, 0, kMaxHeads);
  c.range("head_dim_v", m.head_dim_v, 0, kMaxHeads);
  c.range("head_dim_swa", m.head_dim_k_swa, 0, kMaxHeads);
  c.range("head_dim_v_swa", m.head_dim_v_swa, 0, kMaxHeads);
  c.range("ff", m.ff, 0, kMaxFf);
  c.range("vocab", m.vocab, 1, kMaxVocab);
  c.range("ctx_native", m.ctx_native, 1, kMaxCtx);
  c.range("ctx_extended", m.ctx_extended, 0, kMaxCtx);
  if (m.params < 0 || static_cast<double>(m.params) > kMaxParams)
    c.fail("params", std::to_string(m.params), "is not a parameter count", "0..1e15");
  if (!m.kv_heads_per_layer.empty()) {
    if (m.kv_heads_per_layer.size() != static_cast<size_t>(m.layers))
      c.fail("kv_heads_per_layer", fmt::format("{} entries", m.kv_heads_per_layer.size()), "needs one entry per layer",
             std::to_string(m.layers));
    for (int v : m.kv_heads_per_layer) c.range("kv_heads_per_layer", v, 0, m.heads > 0 ? m.heads : kMaxHeads);
  }
  if (!m.sliding_layers.empty()) {
    if (m.sliding_layers.size() != static_cast<size_t>(m.layers))
      c.fail("sliding_layers", fmt::format("{} entries", m.sliding_layers.size()), "needs one entry per layer", std::to_string(m.layers));
    for (int v : m.sliding_layers) c.range("sliding_layers", v, 0, 1);
  }
  c.range("shared_kv_from", m.shared_kv_from, 0, m.layers);
  if (m.swa) {
    c.range("swa.window", m.swa->window, 1, kMaxCtx);
    c.range("swa.pattern", m.swa->pattern, 0, kMaxLayers);
  }
  if (m.rope_scaling) {
    if (!std::isfinite(m.rope_scaling->factor) || m.rope_scaling->factor <= 0 || m.rope_scaling->factor > 1024)
      c.fail("rope_scaling.factor", fmt::format("{}", m.rope_scaling->factor), "is not a rope scale factor", "above 0, at most 1024");
    c.range("rope_scaling.orig_ctx", m.rope_scaling->orig_ctx, 0, kMaxCtx);
  }
  if (m.moe) {
    c.range("moe.experts", m.moe->experts, 1, kMaxExperts);
    c.range("moe.experts_used", m.moe->experts_used, 1, m.moe->experts);
    c.range("moe.expert_ff", m.moe->expert_ff, 1, kMaxFf);
    c.range("moe.shared_ff", m.moe->shared_ff, 0, kMaxFf * 16);
    c.range("moe.dense_lead", m.moe->dense_lead, 0, m.layers);
    c.range("moe.layer_step", m.moe->layer_step, 1, std::max(1, m.layers));
  }
  c.range("per_layer_embd", m.per_layer_embd, 0, kMaxWidth);
  if (m.mla) {
    c.range("mla.kv_lora_rank", m.mla->kv_lora_rank, 1, kMaxWidth);
    c.range("mla.rope_dim", m.mla->rope_dim, 0, kMaxHeads);
    c.range("mla.nope_dim", m.mla->nope_dim, 0, kMaxHeads);
    c.range("mla.v_head_dim", m.mla->v_head_dim, 0, kMaxHeads);
    c.range("mla.q_lora_rank", m.mla->q_lora_rank, 0, kMaxWidth);
    c.range("mla.indexer_heads", m.mla->indexer_heads, 0, kMaxHeads);
    c.range("mla.indexer_key_length", m.mla->indexer_key_length, 0, kMaxWidth);
    c.range("mla.indexer_top_k", m.mla->indexer_top_k, 0, 1 << 30);
  }
  if (m.recurrent) {
    const Recurrent& r = *m.recurrent;
    const bool mamba_like = r.kind == "mamba" || r.kind == "mamba2" || r.kind == "gdn";
    c.range("recurrent.d_conv", r.d_conv, mamba_like ? 1 : 0, 1024);
    c.range("recurrent.d_inner", r.d_inner, 0, 4 * kMaxWidth);
    c.range("recurrent.d_state", r.d_state, 0, kMaxWidth);
    c.range("recurrent.n_group", r.n_group, 0, kMaxWidth);
    c.range("recurrent.dt_rank", r.dt_rank, 0, kMaxWidth);
    c.range("recurrent.head_size", r.head_size, r.kind == "rwkv6" || r.kind == "rwkv7" ? 1 : 0, kMaxWidth);
    c.range("recurrent.token_shift_count", r.token_shift_count, 0, 16);
    c.range("recurrent.l_cache", r.l_cache, r.kind == "lfm2" ? 1 : 0, 1024);
    c.range("recurrent.attention_every", r.attention_every, 0, kMaxLayers);
    c.range("recurrent.attention_offset", r.attention_offset, 0, std::max(0, r.attention_every - 1));
    for (int il : r.attention_layers) c.range("recurrent.attention_layers", il, -1, m.layers - 1);
    for (int il : r.ffn_only_layers) c.range("recurrent.ffn_only_layers", il, 0, m.layers - 1);
  }
  // Attention layers need heads and head sizes (an MLA latent cache has its own widths).
  if (any_attention(m)) {
    int max_kv = m.kv_heads;
    for (int v : m.kv_heads_per_layer) max_kv = std::max(max_kv, v);
    if (m.heads < 1) c.fail("heads", std::to_string(m.heads), "is zero for a model with attention layers", fmt::format("1..{}", kMaxHeads));
    if (max_kv < 1) c.fail("kv_heads", std::to_string(max_kv), "is zero for a model with attention layers", fmt::format("1..{}", m.heads));
    if (!m.mla || m.mla->legacy) {
      c.range("head_dim", m.head_dim_k, 1, kMaxHeads);
      c.range("head_dim_v", m.head_dim_v, 1, kMaxHeads);
    }
  }
  for (const auto& t : m.file_tensors) {
    if (t.ne0 < 1 || t.nrows < 1 || t.ne0 > (1LL << 40) || t.nrows > (1LL << 40))
      c.fail("tensor " + t.name, fmt::format("{} x {}", t.ne0, t.nrows), "has an impossible shape", "1..2^40 per dimension");
  }
}

void check_model_spec(const ModelSpec& m, const std::string& flag) {
  check_model(m, [&](const std::string& field, const std::string& value, const std::string& problem, const std::string& accepted) {
    throw InputError(flag, m.id, fmt::format("model field '{}' = {} {}", field, value, problem), {accepted});
  });
}

std::string gguf_key_of(const std::string& field) {
  static const std::map<std::string, std::string> keys = {
      {"layers", "block_count"}, {"embd", "embedding_length"}, {"heads", "attention.head_count"},
      {"kv_heads", "attention.head_count_kv"}, {"kv_heads_per_layer", "attention.head_count_kv"},
      {"head_dim", "attention.key_length"}, {"head_dim_v", "attention.value_length"},
      {"head_dim_swa", "attention.key_length_swa"}, {"head_dim_v_swa", "attention.value_length_swa"},
      {"ff", "feed_forward_length"}, {"ctx_native", "context_length"}, {"ctx_extended", "context_length"},
      {"sliding_layers", "attention.sliding_window_pattern"}, {"shared_kv_from", "attention.shared_kv_layers"},
      {"swa.window", "attention.sliding_window"}, {"per_layer_embd", "embedding_length_per_layer_input"},
      {"swa.pattern", "attention.sliding_window_pattern"},
      {"rope_scaling.factor", "rope.scaling.factor"}, {"rope_scaling.orig_ctx", "rope.scaling.original_context_length"},
      {"moe.experts", "expert_count"}, {"moe.experts_used", "expert_used_count"},
      {"moe.expert_ff", "expert_feed_forward_length"}, {"moe.shared_ff", "expert_shared_feed_forward_length"},
      {"moe.dense_lead", "leading_dense_block_count"}, {"moe.layer_step", "interleave_moe_layer_step"},
      {"mla.kv_lora_rank", "attention.kv_lora_rank"},
      {"mla.rope_dim", "rope.dimension_count"}, {"mla.nope_dim", "attention.key_length_mla"},
      {"mla.v_head_dim", "attention.value_length_mla"}, {"mla.q_lora_rank", "attention.q_lora_rank"},
      {"mla.indexer_heads", "attention.indexer.head_count"}, {"mla.indexer_key_length", "attention.indexer.key_length"},
      {"mla.indexer_top_k", "attention.indexer.top_k"},
      {"recurrent.d_conv", "ssm.conv_kernel"}, {"recurrent.d_inner", "ssm.inner_size"}, {"recurrent.d_state", "ssm.state_size"},
      {"recurrent.n_group", "ssm.group_count"}, {"recurrent.dt_rank", "ssm.time_step_rank"}, {"recurrent.head_size", "wkv.head_size"},
      {"recurrent.token_shift_count", "token_shift_count"}, {"recurrent.l_cache", "shortconv.l_cache"},
      {"recurrent.attention_every", "full_attention_interval"}, {"recurrent.attention_offset", "full_attention_interval"},
      {"recurrent.attention_layers", "attention.head_count_kv"}};
  const auto it = keys.find(field);
  return it == keys.end() ? field : it->second;
}

std::string config_key_of(const std::string& field) {
  static const std::map<std::string, std::string> keys = {
      {"layers", "num_hidden_layers"}, {"embd", "hidden_size"}, {"heads", "num_attention_heads"},
      {"kv_heads", "num_key_value_heads"}, {"head_dim", "head_dim"}, {"head_dim_v", "head_dim"}, {"ff", "intermediate_size"},
      {"vocab", "vocab_size"}, {"ctx_native", "max_position_embeddings"}, {"ctx_extended", "rope_scaling.factor"},
      {"params", "model.safetensors.index.json metadata.total_size"}, {"swa.window", "sliding_window"},
      {"rope_scaling.factor", "rope_scaling.factor"}, {"rope_scaling.orig_ctx", "rope_scaling.original_max_position_embeddings"},
      {"moe.experts", "num_local_experts"}, {"moe.experts_used", "num_experts_per_tok"}, {"moe.expert_ff", "moe_intermediate_size"},
      {"moe.shared_ff", "shared_expert_intermediate_size"}, {"moe.dense_lead", "first_k_dense_replace"},
      {"moe.layer_step", "interleave_moe_layer_step"},
      {"mla.kv_lora_rank", "kv_lora_rank"}, {"mla.rope_dim", "qk_rope_head_dim"}, {"mla.nope_dim", "qk_nope_head_dim"},
      {"mla.v_head_dim", "v_head_dim"}, {"mla.q_lora_rank", "q_lora_rank"}, {"mla.indexer_heads", "index_n_heads"},
      {"mla.indexer_key_length", "index_head_dim"}, {"mla.indexer_top_k", "index_topk"}, {"recurrent.d_conv", "linear_conv_kernel_dim"},
      {"recurrent.d_inner", "linear_num_value_heads x linear_value_head_dim"}, {"recurrent.d_state", "linear_key_head_dim"},
      {"recurrent.n_group", "linear_num_key_heads"}, {"recurrent.attention_every", "full_attention_interval"},
      {"recurrent.attention_offset", "full_attention_interval"}};
  const auto it = keys.find(field);
  return it == keys.end() ? field : it->second;
}

}  // namespace kvplan::detail

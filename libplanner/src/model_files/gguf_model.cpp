// A ModelSpec from GGUF metadata and tensor infos, the way llama.cpp reads them
// (src/llama-model.cpp load_hparams / load_tensors, src/llama-arch.cpp key names).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "kvplan/checked.hpp"
#include "kvplan/error.hpp"
#include "kvplan/model_file.hpp"
#include "model_files/validate.hpp"

namespace kvplan {
namespace {

using Value = GgufHeader::Value;

// Unsloth Dynamic quants ("...-UD-Q4_K_XL.gguf", "...-UD-IQ1_S-00001-of-00003.gguf") keep general.file_type of
// the base mix (Q4_K_M, IQ1_S) but choose types per tensor; only the name says which UD mix it is.
std::string dynamic_quant_label(const std::string& name) {
  const auto at = name.find("UD-");
  if (at == std::string::npos || (at > 0 && name[at - 1] != '-' && name[at - 1] != '_' && name[at - 1] != '.')) return "";
  size_t end = at + 3;
  while (end < name.size() && (std::isalnum(static_cast<unsigned char>(name[end])) || name[end] == '_')) ++end;
  return end > at + 3 ? name.substr(at, end - at) : "";
}

class Meta {
 public:
  Meta(const GgufHeader& h, std::string arch, std::string file) : h_(h), arch_(std::move(arch)), file_(std::move(file)) {}

  const Value* find(const std::string& key) const {
    auto it = h_.metadata.find(key);
    return it == h_.metadata.end() ? nullptr : &it->second;
  }
  const Value* arch_key(const std::string& suffix) const { return find(arch_ + "." + suffix); }
  bool has(const std::string& suffix) const { return arch_key(suffix) != nullptr; }

  // A number, or the numbers of a per-layer array. `integral`: llama.cpp reads the key as an integer (or a
  // bool), so a float there (NaN included) is refused, as llama.cpp's typed getters refuse it.
  std::vector<double> numbers(const std::string& suffix, bool integral = false) const {
    const Value* v = arch_key(suffix);
    if (!v) return {};
    if (const auto* i = std::get_if<std::int64_t>(v)) return {static_cast<double>(*i)};
    if (const auto* u = std::get_if<std::uint64_t>(v)) return {static_cast<double>(*u)};
    if (const auto* d = std::get_if<double>(v)) {
      if (integral) bad(suffix, fmt::format("is the float {}; an integer is expected", *d));
      return {*d};
    }
    if (const auto* b = std::get_if<bool>(v)) {
      if (integral) bad(suffix, "is a bool; an integer is expected");  // llama.cpp's typed getter refuses it too
      return {*b ? 1.0 : 0.0};
    }
    if (const auto* a = std::get_if<GgufHeader::Array>(v)) {
      if (a->numbers.size() != a->count) bad(suffix, "is an array kvplan cannot read");
      if (integral && (a->type == 6 || a->type == 12)) bad(suffix, "is an array of floats; integers are expected");
      for (double d : a->numbers)
        if (!std::isfinite(d)) bad(suffix, fmt::format("has the entry {}; finite numbers are expected", d));
      return a->numbers;
    }
    bad(suffix, "is not a number");
  }
  int integer(const std::string& suffix, int fallback, bool required = false) const {
    const auto n = numbers(suffix, true);
    if (n.empty()) {
      if (required) bad(suffix, "is missing");
      return fallback;
    }
    const double v = *std::max_element(n.begin(), n.end());
    if (!(v >= 0 && v <= 1e9)) bad(suffix, fmt::format("has an impossible value {} (accepted: 0..1000000000)", v));
    return static_cast<int>(v);
  }
  std::vector<int> per_layer(const std::string& suffix, int layers) const {
    const auto n = numbers(suffix, true);
    if (n.size() <= 1) return {};
    if (static_cast<int>(n.size()) != layers) bad(suffix, fmt::format("has {} entries for {} layers", n.size(), layers));
    std::vector<int> out;
    for (double d : n) {
      if (!(d >= 0 && d <= 1e6)) bad(suffix, fmt::format("has an impossible entry {} (accepted: 0..1000000)", d));
      out.push_back(static_cast<int>(d));
    }
    return out;
  }
  std::string string(const std::string& key) const {
    const Value* v = find(key);
    const auto* s = v ? std::get_if<std::string>(v) : nullptr;
    return s ? *s : std::string();
  }
  [[noreturn]] void bad(const std::string& suffix, const std::string& why) const {
    throw InputError(file_, arch_ + "." + suffix, "GGUF metadata " + why);
  }

 private:
  const GgufHeader& h_;
  std::string arch_;
  std::string file_;
};

// Tensors created with the input layer's buffer type stay in host memory (llama-model.cpp: "there is
// very little benefit to offloading the input layer, so always keep it on the CPU").
bool is_input_tensor(const std::string& name) {
  static const char* inputs[] = {"token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias", "token_types.weight",
                                 "pos_embd.weight", "per_layer_token_embd.weight"};
  return std::any_of(std::begin(inputs), std::end(inputs), [&](const char* n) { return name == n; });
}

// "blk.12.attn_q.weight" -> 12; -1 outside the repeating layers.
int layer_index(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int il = 0;
  size_t i = 4;
  for (; i < name.size() && i < 10 && std::isdigit(static_cast<unsigned char>(name[i])); ++i) il = il * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? il : -1;
}

}  // namespace

ModelSpec model_from_gguf(const std::vector<GgufHeader>& splits, const std::vector<std::string>& paths, const Catalog& catalog,
                          const EngineSpec& engine) {
  const GgufHeader& h = splits.front();
  const std::string& file = paths.front();
  ModelSpec m;
  m.file_paths = paths;
  Meta top(h, "general", file);
  m.arch = top.string("general.architecture");
  if (m.arch.empty()) throw InputError(file, "general.architecture", "GGUF metadata is missing");
  const EngineSpec::ArchRule* rule = engine.arch(m.arch);
  if (!rule) {
    const auto why = engine.unmodelled_archs.find(m.arch);
    throw InputError(file, m.arch,
                     fmt::format("architecture '{}' is not modelled yet ({}); kvplan refuses rather than guess", m.arch,
                                 why != engine.unmodelled_archs.end() ? why->second : "unknown to kvplan"));
  }
  const Meta meta(h, m.arch, file);
  const std::string stem = std::filesystem::path(file).stem().string();
  m.id = stem;
  m.name = detail::printable(top.string("general.name").empty() ? stem : top.string("general.name"));
  m.family = rule->family.empty() ? m.arch : rule->family;
  m.source = "GGUF header of " + file;

  m.layers = meta.integer("block_count", 0, true);
  if (m.layers <= 0 || m.layers > 4096) meta.bad("block_count", "is out of range");
  m.embd = meta.integer("embedding_length", 0, true);
  m.heads = meta.integer("attention.head_count", 0);
  (void)meta.per_layer("attention.head_count", m.layers);  // a per-layer array must have one entry per layer
  m.kv_heads_per_layer = meta.per_layer("attention.head_count_kv", m.layers);
  m.kv_heads = m.kv_heads_per_layer.empty() ? meta.integer("attention.head_count_kv", m.heads)
                                            : *std::max_element(m.kv_heads_per_layer.begin(), m.kv_heads_per_layer.end());
  m.head_dim_k = meta.integer("attention.key_length", m.heads > 0 ? m.embd / m.heads : 0);
  m.head_dim_v = meta.integer("attention.value_length", m.head_dim_k);
  m.head_dim_k_swa = meta.integer("attention.key_length_swa", 0);
  m.head_dim_v_swa = meta.integer("attention.value_length_swa", m.head_dim_k_swa);
  m.ff = meta.integer("feed_forward_length", 0);
  m.ctx_native = meta.integer("context_length", 0, true);

  // sliding window / chunked attention
  int window = meta.integer("attention.sliding_window", 0);
  if (rule->window_fixed > 0 && !(meta.has("attention.sliding_window") && window == 0)) window = rule->window_fixed;
  if (rule->swa_pattern > 0 || meta.has("attention.sliding_window_pattern")) {
    m.sliding_layers = meta.per_layer("attention.sliding_window_pattern", m.layers);
    if (window > 0) m.swa = SlidingWindow{window, rule->swa_pattern, rule->chunked};
  }
  // b10454 models/qwen35.cpp load_arch_hparams: nextn_predict_layers trailing blocks, skipped without load_mtp
  // (TENSOR_SKIP) and outside the hybrid cache's filters (llama-model.cpp create_memory: il < n_layer())
  if (rule->mtp_skipped) {
    m.mtp_layers = meta.integer("nextn_predict_layers", 0);
    if (m.mtp_layers >= m.layers) meta.bad("nextn_predict_layers", fmt::format("is {}, not below block_count {}", m.mtp_layers, m.layers));
  }
  if (meta.has("attention.shared_kv_layers")) m.shared_kv_from = m.layers - meta.integer("attention.shared_kv_layers", 0);
  // src/models/gemma3n.cpp load_arch_hparams: n_layer_kv_from_start = 20 whatever the file says (llama-hparams.cpp
  // has_kv: layers from it on have no cache of their own); a model of at most that many layers caches every layer.
  if (rule->kv_from_start > 0) m.shared_kv_from = m.layers > rule->kv_from_start ? rule->kv_from_start : 0;
  // src/models/gemma4.cpp load_arch_hparams: embedding_length_per_layer_input (required; 0 on the 26B-A4B and 31B)
  // gives E2B/E4B their per-layer input embeddings. Gemma 3n's width is the engine's constant (arch rule per_layer_input).
  if (rule->per_layer_input == 0) m.per_layer_embd = meta.integer("embedding_length_per_layer_input", 0);

  // llama.cpp granite*.cpp: rope_finetuned doubles as the RoPE switch (the converter writes false for hybrids)
  if (!rule->rope_switch_key.empty()) {
    const std::vector<double> on = meta.numbers(rule->rope_switch_key);
    if (!on.empty()) m.rope = on[0] != 0;
  }
  if (meta.has("expert_count") && meta.integer("expert_count", 0) > 0) {
    Moe moe;
    moe.experts = meta.integer("expert_count", 0);
    moe.experts_used = meta.integer("expert_used_count", 0);
    moe.expert_ff = meta.integer("expert_feed_forward_length", m.ff);
    moe.shared_ff = meta.integer("expert_shared_feed_forward_length", 0);
    // DeepSeek's shared experts: count x expert width (llama-model.cpp: n_ff_exp * n_expert_shared)
    if (moe.shared_ff == 0 && meta.has("expert_shared_count"))
      moe.shared_ff = static_cast<int>(std::min<long long>(static_cast<long long>(meta.integer("expert_shared_count", 0)) * moe.expert_ff,
                                                           1LL << 30));  // range-checked by check_model
    moe.dense_lead = meta.integer("leading_dense_block_count", 0);
    moe.layer_step = meta.integer("interleave_moe_layer_step", 1);  // range-checked by check_model
    // Llama 4 writes no shared-expert key: its one shared expert has the routed width
    // (src/llama-model.cpp create_tensors, LLM_ARCH_LLAMA4: n_ff_shexp = n_ff_exp)
    if (moe.shared_ff == 0 && m.arch == "llama4") moe.shared_ff = moe.expert_ff;
    m.moe = moe;
  }
  if (rule->mla) {
    Mla mla;
    mla.kv_lora_rank = meta.integer("attention.kv_lora_rank", 0, true);
    mla.rope_dim = meta.integer("rope.dimension_count", 0, true);
    // Without key_length_mla the GGUF predates MLA conversion: llama.cpp caches plain MHA K and V.
    mla.legacy = !meta.has("attention.key_length_mla");
    mla.nope_dim = mla.legacy ? m.head_dim_k - mla.rope_dim : meta.integer("attention.key_length_mla", 0) - mla.rope_dim;
    mla.v_head_dim = mla.legacy ? m.head_dim_v : meta.integer("attention.value_length_mla", 0);
    mla.q_lora_rank = meta.integer("attention.q_lora_rank", 0);
    // b10454 src/models/deepseek32.cpp load_arch_hparams: the three indexer keys are required, and load_arch_tensors
    // throws "DEEPSEEK32 architecture requires MLA" without key_length_mla (hparams.is_mla()).
    if (rule->dsa_indexer) {
      if (mla.legacy) meta.bad("attention.key_length_mla", "is missing: llama.cpp loads this architecture only as MLA");
      mla.indexer_heads = meta.integer("attention.indexer.head_count", 0, true);
      mla.indexer_key_length = meta.integer("attention.indexer.key_length", 0, true);
      mla.indexer_top_k = meta.integer("attention.indexer.top_k", 0, true);
      // deepseek32.cpp build graph: GGML_ASSERT(n_rot <= n_embd_indexer_head) (the indexer head is [rope | nope])
      if (mla.indexer_key_length == 0 || mla.indexer_key_length < mla.rope_dim)
        meta.bad("attention.indexer.key_length", fmt::format("is {}; llama.cpp needs at least rope.dimension_count ({})",
                                                             mla.indexer_key_length, mla.rope_dim));
      if (mla.indexer_heads == 0) meta.bad("attention.indexer.head_count", "is 0; the indexer needs at least one head");
    }
    m.mla = mla;
  }
  if (!rule->recurrent.empty()) {
    Recurrent r;
    r.kind = rule->recurrent;
    r.d_conv = meta.integer("ssm.conv_kernel", 0);
    r.d_inner = meta.integer("ssm.inner_size", 0);
    r.d_state = meta.integer("ssm.state_size", 0);
    r.n_group = meta.integer("ssm.group_count", 0);
    r.dt_rank = meta.integer("ssm.time_step_rank", 0);
    r.head_size = meta.integer("wkv.head_size", 0);
    r.token_shift_count = meta.integer("token_shift_count", 2);
    r.l_cache = meta.integer("shortconv.l_cache", 0);
    if (rule->attention == "parallel") {
      r.parallel = true;  // llama-model.cpp create_memory: Falcon-H1's filter_attn and filter_recr accept every layer
    } else if (rule->attention == "kv_heads_ff") {
      // b10454 models/nemotron-h.cpp load_arch_hparams: recurrent iff n_head_kv(il) == 0 and n_ff(il) == 0; create_memory
      // caches attention only where n_ff(il) == 0: a layer with an FFN (per-layer feed_forward_length) has neither
      const auto ff = meta.per_layer("feed_forward_length", m.layers);
      for (int il = 0; il < m.layers; ++il) {
        const int f = ff.empty() ? m.ff : ff[static_cast<size_t>(il)];
        if (f > 0) r.ffn_only_layers.push_back(il);
        else if (m.kv_heads_at(il) > 0) r.attention_layers.push_back(il);
      }
      if (r.attention_layers.empty()) r.attention_layers.push_back(-1);
    } else if (rule->attention == "kv_heads") {
      for (int il = 0; il < m.layers; ++il)
        if (m.kv_heads_at(il) > 0) r.attention_layers.push_back(il);
      if (r.attention_layers.empty()) r.attention_layers.push_back(-1);  // no attention layer at all
    } else if (rule->attention == "interval" && !meta.per_layer("attention.recurrent_layers", m.layers).empty()) {
      // models/qwen35.cpp: an explicit per-layer recurrent flag array overrides full_attention_interval
      const auto recr = meta.per_layer("attention.recurrent_layers", m.layers);
      for (int il = 0; il < m.layers - m.mtp_layers; ++il)
        if (recr[static_cast<size_t>(il)] == 0) r.attention_layers.push_back(il);
      if (r.attention_layers.empty()) r.attention_layers.push_back(-1);
    } else if (rule->attention == "interval") {
      r.attention_every = meta.integer("full_attention_interval", rule->attention_interval);
      if (r.attention_every <= 0) meta.bad("full_attention_interval", "must be positive");
      r.attention_offset = r.attention_every - 1;
    }
    const bool mamba_like = r.kind == "mamba" || r.kind == "mamba2" || r.kind == "gdn";
    if (mamba_like && (r.d_conv <= 0 || r.d_inner <= 0 || r.d_state <= 0)) meta.bad("ssm.*", "is missing (conv_kernel, inner_size, state_size)");
    if ((r.kind == "rwkv6" || r.kind == "rwkv7") && r.head_size <= 0) meta.bad("wkv.head_size", "is missing");
    if (r.kind == "lfm2" && r.l_cache <= 0) meta.bad("shortconv.l_cache", "is missing");
    m.recurrent = r;
  }

  // src/models/glm4-moe.cpp load_arch_tensors: the tensors of the last nextn_predict_layers blocks (the NextN/MTP
  // block) are created with TENSOR_SKIP, which llama-model-loader.cpp create_tensor never allocates; their layers
  // still get a KV cache (llama-kv-cache.cpp loops over n_layer_all), so block_count stays the layer count.
  const int nextn = rule->nextn_skipped ? meta.integer("nextn_predict_layers", 0) : 0;
  if (nextn >= m.layers) meta.bad("nextn_predict_layers", fmt::format("is {}, not below block_count {}", nextn, m.layers));
  auto skipped = [&](const std::string& name) {
    if (nextn == 0 || name.rfind("blk.", 0) != 0) return false;
    const auto dot = name.find('.', 4);
    const std::string digits = name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
    return !digits.empty() && digits.size() < 6 && std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }) &&
           std::stoi(digits) >= m.layers - nextn;
  };

  // Tensors: every split's, with the exact ggml type; file bytes must hold the tensor data.
  std::int64_t params = 0;
  bool has_output = false;
  for (size_t i = 0; i < splits.size(); ++i) {
    for (const auto& t : splits[i].tensors) {
      if (m.mtp_layers > 0 && m.is_mtp(layer_index(t.name))) continue;  // not loaded (TENSOR_SKIP), not counted
      const GgmlType* type = nullptr;
      for (const auto& g : engine.ggml_types)
        if (static_cast<std::uint32_t>(g.id) == t.type) type = &g;
      if (!type) throw InputError(paths[i], t.name, fmt::format("tensor has ggml type {}, which kvplan does not know", t.type));
      if (t.ne[0] % type->block != 0)
        throw InputError(paths[i], t.name, fmt::format("row of {} is not a multiple of {}'s block {}", t.ne[0], type->name, type->block));
      std::int64_t rows = 1;
      for (size_t d = 1; d < t.ne.size(); ++d) rows = checked_mul(rows, t.ne[d], "tensor " + t.name + " shape");
      const auto bytes = static_cast<std::uint64_t>(checked_mul(type->row_size(t.ne[0]), rows, "tensor " + t.name + " bytes"));
      std::uint64_t end = 0;
      if (t.offset % splits[i].alignment != 0 || __builtin_add_overflow(splits[i].data_offset, t.offset, &end) ||
          __builtin_add_overflow(end, bytes, &end) || end > splits[i].file_size)
        throw InputError(paths[i], t.name, "tensor data lies outside the file (truncated or corrupt)");
      params = checked_add(params, checked_mul(t.ne[0], rows, "tensor " + t.name + " elements"), "parameter count");
      has_output |= t.name == "output.weight";
      if (t.name == "token_embd.weight" && t.ne.size() >= 2) {
        if (t.ne[1] > (1 << 24)) throw InputError(paths[i], t.name, fmt::format("has {} rows: not a vocabulary (accepted: 1..16777216)", t.ne[1]));
        m.vocab = static_cast<int>(t.ne[1]);
      }
      if (!skipped(t.name)) m.file_tensors.push_back({t.name, type->name, t.ne[0], rows, is_input_tensor(t.name)});
    }
  }
  if (m.file_tensors.empty()) throw InputError(file, "", "the GGUF holds no tensors");
  if (m.vocab <= 0) throw InputError(file, "token_embd.weight", "is missing: cannot tell the vocabulary size");
  // A tied model has no output tensor: llama.cpp duplicates token_embd for the output on the GPU.
  if (!has_output) {
    for (const auto& t : m.file_tensors)
      if (t.name == "token_embd.weight") {
        m.file_tensors.push_back({"output.weight (copy of token_embd)", t.type, t.ne0, t.nrows, false});
        m.tied_embeddings = true;
        break;
      }
  }
  m.params = params;

  // The file's weight format (general.file_type), so --weights can be checked against it.
  if (const Value* ft = h.metadata.count("general.file_type") ? &h.metadata.at("general.file_type") : nullptr) {
    std::int64_t id = -1;
    if (const auto* i = std::get_if<std::int64_t>(ft)) id = *i;
    if (const auto* u = std::get_if<std::uint64_t>(ft)) id = static_cast<std::int64_t>(*u);
    for (const auto& f : catalog.weight_formats)
      if (f.ftype >= 0 && f.ftype == id) m.file_format = f.id;
    if (m.file_format.empty()) m.file_format = fmt::format("ftype {}", id);
  } else {
    m.file_format = "GGUF";
  }
  m.file_quant_label = dynamic_quant_label(std::filesystem::path(file).filename().string());
  // The numbers as a whole: ranges, heads that divide, widths the memory rules can size (model_files/validate.hpp).
  detail::check_model(m, [&](const std::string& field, const std::string& value, const std::string& problem, const std::string& accepted) {
    const std::string key = field == "vocab" ? "token_embd.weight" : field == "params" ? "tensor shapes"
                          : field.rfind("tensor ", 0) == 0 ? field.substr(7) : m.arch + "." + detail::gguf_key_of(field);
    throw InputError(file, key, fmt::format("GGUF metadata {} {}", value, problem), {accepted});
  });
  return m;
}

}  // namespace kvplan

#include <algorithm>
#include <cctype>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string_view>

#include <re2/re2.h>

#include "kvplan/checked.hpp"
#include "kvplan/error.hpp"
#include "kvplan/memory.hpp"
#include "memory/weights.hpp"

namespace kvplan {
namespace {

constexpr std::string_view kTiedOutputCopy = "output.weight (copy of token_embd)";

// src/llama-quant.cpp use_more_bits: the first and last eighth of the layers and every third in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// A rule's layer selector (TensorTypeRule::layers), read once per rule: a 64-layer model asks it per layer and rule.
enum class LayerSet : unsigned char { all, more_bits, first_eighth, first_sixteenth, first_n, middle, none };

LayerSet layer_set(const std::string& layers) {
  if (layers == "all") return LayerSet::all;
  if (layers == "more_bits") return LayerSet::more_bits;
  if (layers == "first_eighth") return LayerSet::first_eighth;
  if (layers == "first_sixteenth") return LayerSet::first_sixteenth;
  if (layers == "first_n") return LayerSet::first_n;
  if (layers == "middle") return LayerSet::middle;
  return LayerSet::none;
}

bool layer_selected(LayerSet set, int first_n, int il, int n_layer) {
  if (set == LayerSet::all) return true;
  if (il < 0) return false;  // a per-layer selector never matches token_embd/output
  switch (set) {
    case LayerSet::more_bits: return use_more_bits(il, n_layer);
    case LayerSet::first_eighth: return il < n_layer / 8;
    case LayerSet::first_sixteenth: return il < n_layer / 16;
    case LayerSet::first_n: return il < first_n;
    case LayerSet::middle: return il >= n_layer / 8 && il < 7 * n_layer / 8;  // IQ3_XS ffn_gate/ffn_up
    default: return false;
  }
}

bool layer_selected(const TensorTypeRule& r, int il, int n_layer) { return layer_selected(layer_set(r.layers), r.first_n, il, n_layer); }

// Routed-expert weights (3-D in the GGUF: one matrix per expert).
bool is_routed_expert(std::string_view base_name) {
  return base_name == "ffn_gate_exps" || base_name == "ffn_up_exps" || base_name == "ffn_down_exps";
}

// The type llama-quantize gives each tensor of a recipe (src/llama-quant.cpp llama_tensor_get_type: the format's
// default type, its per-tensor overrides, and the fallback for rows that do not divide into the type's block).
// The rules naming a tensor kind, and their conditions on the model, are found once per kind rather than per
// tensor: a 64-layer model has ~800 tensors per format and the ranker sizes every offered format.
class RecipeTyper {
 public:
  RecipeTyper(const ModelSpec& m, const WeightFormat& f, const EngineSpec& e)
      : model_(m), format_(f), engine_(e), field_("weights " + f.id) {}

  const GgmlType& operator()(std::string_view base_name, int il, std::int64_t ne0) {
    // A checkpoint released with quantized experts (gpt-oss: MXFP4) is converted with the experts as they are
    // (convert_hf_to_gguf.py GptOssModel repacks the blocks, whatever --outtype) and published GGUFs keep them
    // at every file type (bartowski: "all quants keep the feed forward networks at mxfp4"; sizes in weights_test).
    if (!model_.native_expert_type.empty() && is_routed_expert(base_name)) return lookup(model_.native_expert_type);
    // A tied model has no output tensor; llama-quantize then treats token_embd as the output.
    // per_layer_token_embd (Gemma 3n/4) is a token embedding to llama-quant.cpp (tensor_name_match_token_embd), so a tied
    // model quantizes it as the output too.
    const bool token_embedding = base_name == "token_embd" || base_name == "per_layer_token_embd";
    const std::string_view role = !token_embedding ? base_name : model_.tied_embeddings ? "output" : "token_embd";
    const GgmlType* type = chosen_type(kind(role), il);
    for (int guard = 0; guard < 4; ++guard) {  // llama-quant.cpp: "tensor cols not divisible by QK_K" fallback chain
      if (ne0 % type->block == 0) break;
      auto it = engine_.quant_fallback.find(type->name);
      type = &lookup(it != engine_.quant_fallback.end() ? it->second : std::string("f16"));
    }
    return *type;
  }

  const GgmlType& lookup(const std::string& name) {
    for (const auto& [n, t] : types_)
      if (n == name) return *t;
    const GgmlType& t = engine_.type(name, field_);
    types_.emplace_back(name, &t);
    return t;
  }

 private:
  // A tensor kind: the rules that name it and whose conditions on the whole model hold (in the format's order), and
  // the type they choose per layer, worked out on first use (index il + 1; the layers repeat, the rules do not).
  struct Kind {
    std::string role;
    const char* literal = nullptr;  // the name's characters as first asked: callers pass the same literals again
    std::vector<const TensorTypeRule*> rules;
    std::vector<const GgmlType*> by_layer;
  };

  Kind& kind(std::string_view role) {
    for (Kind& k : kinds_)  // the same characters as last time: one compare instead of one per kind
      if (k.literal == role.data() && k.role == role) return k;
    for (Kind& k : kinds_)
      if (k.role == role) return k;
    Kind k{std::string(role), role.data(), {}, std::vector<const GgmlType*>(static_cast<size_t>(model_.layers) + 1, nullptr)};
    for (const auto& r : format_.rules)
      if (std::find(r.tensors.begin(), r.tensors.end(), role) != r.tensors.end() && holds_for_model(r)) k.rules.push_back(&r);
    kinds_.push_back(std::move(k));
    return kinds_.back();
  }

  const GgmlType* chosen_type(Kind& k, int il) {
    const size_t slot = il < 0 ? 0 : static_cast<size_t>(il) + 1;
    if (slot < k.by_layer.size() && k.by_layer[slot]) return k.by_layer[slot];
    const std::string* chosen = &format_.base_type;
    for (const TensorTypeRule* r : k.rules)
      if (layer_selected(*r, il, model_.layers)) chosen = &r->type;
    const GgmlType* type = &lookup(*chosen);
    if (slot < k.by_layer.size()) k.by_layer[slot] = type;
    return type;
  }

  bool holds_for_model(const TensorTypeRule& r) const {
    const int n_expert = model_.moe ? model_.moe->experts : 0;
    // llama.cpp's IQ1/IQ2 attn_v test is "n_gqa() >= 4 || n_expert >= 4": a rule with both matches on either.
    const bool gqa_ok = r.min_gqa > 0 && model_.kv_heads > 0 && model_.heads / model_.kv_heads >= r.min_gqa;
    const bool experts_ok = r.min_experts > 0 && n_expert >= r.min_experts;
    if ((r.min_gqa > 0 || r.min_experts > 0) && !gqa_ok && !experts_ok) return false;
    if (r.experts >= 0 && n_expert != r.experts) return false;
    return r.n_layer <= 0 || model_.layers == r.n_layer;
  }

  const ModelSpec& model_;
  const WeightFormat& format_;
  const EngineSpec& engine_;
  const std::string field_;
  std::deque<Kind> kinds_;  // deque: references stay valid
  std::vector<std::pair<std::string, const GgmlType*>> types_;
};

// One tensor of a recipe before it has a name: "blk.<il>.<base><suffix>" (no "blk." part when il < 0).
struct RecipeTensor {
  int il;
  std::string_view base, suffix;
  const GgmlType& type;
  std::int64_t ne0, nrows;
  bool on_host;
};

std::string tensor_name(const RecipeTensor& t) {
  std::string name;
  name.reserve(t.base.size() + t.suffix.size() + 16);
  if (t.il >= 0) name.append("blk.").append(std::to_string(t.il)).append(".");
  return name.append(t.base).append(t.suffix);
}

// Attention widths of layer il. Gemma 4 (src/models/gemma4.cpp load_arch_tensors) varies them per layer: head size
// n_embd_head_k(il) (key_length_swa on sliding layers), n_head_kv(il) from the head_count_kv array, and no attn_v on
// the full-attention layers of an attention_k_eq_v model (wv TENSOR_NOT_REQUIRED; the converter writes none).
struct AttentionWidths {
  std::int64_t head_k, q, k, v, o;
  bool has_v;
};

AttentionWidths attention_widths(const ModelSpec& m, int il) {
  const bool sliding = m.is_sliding(il);
  const std::int64_t hk = sliding && m.head_dim_k_swa > 0 ? m.head_dim_k_swa : m.head_dim_k;
  const std::int64_t hv = sliding && m.head_dim_v_swa > 0 ? m.head_dim_v_swa : m.head_dim_v;
  const std::int64_t kvh = m.kv_heads_per_layer.empty() ? m.kv_heads : m.kv_heads_per_layer.at(static_cast<size_t>(il));
  return {hk, checked_mul(m.heads, hk, "head_count x key_length"), checked_mul(kvh, hk, "head_count_kv x key_length"),
          checked_mul(kvh, hv, "head_count_kv x value_length"), checked_mul(m.heads, hv, "head_count x value_length"),
          !(m.k_eq_v && !sliding)};
}

// Gemma 4's extra tensors (src/models/gemma4.cpp load_arch_tensors). Model-wide, before the layers: the per-layer
// input embeddings of E2B/E4B (per_layer_token_embd is an input-layer get_rows, so host; per_layer_model_proj is
// never quantized, llama-quant.cpp) and the full layers' rope_freqs. Per layer: layer_output_scale, the per-layer
// input gate and projection, and on MoE layers the router scale, the extra norms and the experts' down scale.
template <class Matrix, class Vec, class Emit>
void gemma4_model_tensors(const ModelSpec& m, RecipeTyper& typer, Matrix&& matrix, Vec&& vec, Emit&& emit) {
  const std::int64_t ple = static_cast<std::int64_t>(m.per_layer_embd) * m.layers;
  if (ple > 0) {
    matrix("per_layer_token_embd", -1, ple, m.vocab, /*host=*/true);
    emit(RecipeTensor{-1, "per_layer_model_proj", ".weight", typer.lookup("f16"), m.embd, ple, false});
    vec("per_layer_proj_norm", -1, m.per_layer_embd);
  }
  vec("rope_freqs", -1, m.head_dim_k / 2);
}

template <class Matrix, class Vec>
void gemma4_layer_tensors(const ModelSpec& m, int il, Matrix&& matrix, Vec&& vec) {
  vec("layer_output_scale", il, 1);
  if (m.per_layer_embd > 0) {
    matrix("inp_gate", il, m.embd, m.per_layer_embd);
    matrix("proj", il, m.per_layer_embd, m.embd);
    vec("post_norm", il, m.embd);
  }
  if (m.is_moe_layer(il)) {
    vec("ffn_gate_inp", il, m.embd, ".scale");
    for (std::string_view norm : {"pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"}) vec(norm, il, m.embd);
    vec("ffn_down_exps", il, m.moe->experts, ".scale");
  }
}

// The tensors of a GGUF for `model` as llama.cpp's load_tensors creates them, each passed to `emit` in file
// order (head(), layer(il) for every layer, tail()). Norms, biases, sinks and the MoE router stay f32.
template <class Emit>
class RecipeTensors {
 public:
  RecipeTensors(const ModelSpec& m, RecipeTyper& typer, Emit& emit)
      : m_(m), typer_(typer), emit_(emit), f32_(typer.lookup("f32")),
        // phi3 and chatglm store one attn_qkv and a fused gate|up in ffn_up (src/llama-model.cpp load_tensors)
        fused_qkv_(m.arch == "phi3" || m.arch == "chatglm"),
        // gpt-oss (LLM_ARCH_OPENAI_MOE load_tensors) also has an attn_output bias, a router bias and per-expert biases
        moe_biases_(m.arch == "gpt-oss"),
        // Gemma 4's MoE layers keep their dense FFN beside the experts (src/models/gemma4.cpp: "for expert layers, we
        // use normal FFN as shared expert")
        gemma4_(m.arch == "gemma4") {}

  void head() {
    // src/llama-model.cpp load_tensors: dev_input is always the CPU, so token_embd stays in host memory.
    matrix("token_embd", -1, m_.embd, m_.vocab, /*host=*/true);
    if (gemma4_) gemma4_model_tensors(m_, typer_, matrix_fn(), vec_fn(), emit_);
  }

  void layer(int il) {
    const ModelSpec& m = m_;
    const std::int64_t embd = m.embd;
    const AttentionWidths w = attention_widths(m, il);
    vec("attn_norm", il, embd);
    if (fused_qkv_) {
      matrix("attn_qkv", il, embd, w.q + w.k + w.v);
    } else {
      matrix("attn_q", il, embd, w.q);
      matrix("attn_k", il, embd, w.k);
      if (w.has_v) matrix("attn_v", il, embd, w.v);
    }
    if (m.qkv_bias) {
      vec("attn_q", il, w.q, ".bias");
      vec("attn_k", il, w.k, ".bias");
      vec("attn_v", il, w.v, ".bias");
    }
    if (m.qk_norm) {
      vec("attn_q_norm", il, w.head_k);
      vec("attn_k_norm", il, w.head_k);
    }
    if (m.attn_sinks) vec("attn_sinks", il, m.heads);
    matrix("attn_output", il, w.o, embd);
    if (moe_biases_) vec("attn_output", il, embd, ".bias");
    if (m.post_norms) {
      vec("post_attention_norm", il, embd);
      vec("post_ffw_norm", il, embd);
    }
    vec("ffn_norm", il, embd);
    const bool moe_layer = m.is_moe_layer(il);
    if (moe_layer) experts(il);  // else dense: leading layers (glm4-moe.cpp, deepseek2.cpp n_layer_dense_lead), Llama 4's interleave
    if (!moe_layer && fused_qkv_) {
      matrix("ffn_up", il, embd, 2LL * m.ff);
      matrix("ffn_down", il, m.ff, embd);
    } else if (!moe_layer || gemma4_) {
      matrix("ffn_gate", il, embd, m.ff_at(il));
      matrix("ffn_up", il, embd, m.ff_at(il));
      matrix("ffn_down", il, m.ff_at(il), embd);
    }
    if (gemma4_) gemma4_layer_tensors(m, il, matrix_fn(), vec_fn());
  }

  void tail() {
    vec("output_norm", -1, m_.embd);
    // A tied model duplicates token_embd as the output matrix on the GPU (TENSOR_DUPLICATED).
    if (m_.tied_embeddings) {
      emit_(RecipeTensor{-1, kTiedOutputCopy, "", typer_("token_embd", -1, m_.embd), m_.embd, m_.vocab, false});
    } else {
      matrix("output", -1, m_.embd, m_.vocab);
    }
  }

 private:
  void matrix(std::string_view base, int il, std::int64_t ne0, std::int64_t rows, bool host = false) {
    emit_(RecipeTensor{il, base, ".weight", typer_(base, il, ne0), ne0, rows, host});
  }
  void vec(std::string_view base, int il, std::int64_t n, std::string_view suffix = ".weight") {
    emit_(RecipeTensor{il, base, suffix, f32_, n, 1, false});
  }
  auto matrix_fn() {
    return [this](std::string_view base, int il, std::int64_t ne0, std::int64_t rows, bool host = false) { matrix(base, il, ne0, rows, host); };
  }
  auto vec_fn() {
    return [this](std::string_view base, int il, std::int64_t n, std::string_view suffix = ".weight") { vec(base, il, n, suffix); };
  }

  void experts(int il) {
    const std::int64_t embd = m_.embd, e = m_.moe->experts, eff = m_.moe->expert_ff;
    emit_(RecipeTensor{il, "ffn_gate_inp", ".weight", f32_, embd, e, false});
    const std::int64_t rows = checked_mul(eff, e, "expert_feed_forward_length x expert_count");
    matrix("ffn_gate_exps", il, embd, rows);
    matrix("ffn_up_exps", il, embd, rows);
    matrix("ffn_down_exps", il, eff, checked_mul(embd, e, "embedding_length x expert_count"));
    if (moe_biases_) {
      emit_(RecipeTensor{il, "ffn_gate_inp", ".bias", f32_, e, 1, false});
      emit_(RecipeTensor{il, "ffn_gate_exps", ".bias", f32_, eff, e, false});
      emit_(RecipeTensor{il, "ffn_up_exps", ".bias", f32_, eff, e, false});
      emit_(RecipeTensor{il, "ffn_down_exps", ".bias", f32_, embd, e, false});
    }
    if (m_.moe->shared_ff > 0) {
      matrix("ffn_gate_shexp", il, embd, m_.moe->shared_ff);
      matrix("ffn_up_shexp", il, embd, m_.moe->shared_ff);
      matrix("ffn_down_shexp", il, m_.moe->shared_ff, embd);
    }
  }

  const ModelSpec& m_;
  RecipeTyper& typer_;
  Emit& emit_;
  const GgmlType& f32_;
  const bool fused_qkv_, moe_biases_, gemma4_;
};

template <class Emit>
void for_each_recipe_tensor(const ModelSpec& m, RecipeTyper& typer, Emit&& emit) {
  RecipeTensors<Emit> recipe(m, typer, emit);
  recipe.head();
  for (int il = 0; il < m.layers; ++il) recipe.layer(il);
  recipe.tail();
}

// What decides a recipe layer's tensors (RecipeTensors::layer): its shapes (sliding window, KV heads, FFN width, MoE)
// and which of the format's rules select it (a tensor kind's type is the last selecting rule's that names it, or the
// format's base type; the fallback for rows that do not divide depends on the shape). Layers of one class have the
// same tensors but for their index: a model's layers mostly repeat (llama-quant's use_more_bits in a period of 3).
struct LayerClass {
  bool sliding = false, moe = false;
  std::int64_t kv_heads = 0, ff = 0;
  std::uint64_t selected = 0;  // bit i: format rule i selects the layer (LayerRepeats keeps formats of at most 64 rules)
  bool operator==(const LayerClass&) const = default;
};

void check_has_recipe(const ModelSpec& m, const WeightFormat& format) {
  if (m.mla || m.recurrent)
    throw InputError("--weights", format.id, "no per-tensor recipe for " + m.arch + " models in the catalog; sized from params");
}

}  // namespace

// The tensors of a GGUF for `model` and the type llama-quantize gives each; a GGUF's own tensors as they are.
std::vector<WeightTensor> weight_tensors(const ModelSpec& m, const WeightFormat& format, const EngineSpec& engine) {
  if (!m.file_tensors.empty()) return m.file_tensors;
  check_has_recipe(m, format);
  std::vector<WeightTensor> out;
  out.reserve(static_cast<size_t>(std::max(0, m.layers)) * 24 + 4);
  RecipeTyper typer(m, format, engine);
  for_each_recipe_tensor(m, typer, [&](const RecipeTensor& t) {
    out.push_back({tensor_name(t), t.type.name, t.ne0, t.nrows, t.on_host});
  });
  return out;
}

// Full offload: every tensor but token_embd in the GPU buffer (src/llama-model.cpp load_tensors).
// Host bytes are the CPU_Mapped buffer (CPU alignment, no row padding).
Placement Placement::for_request(const ModelSpec& m, std::optional<int> n_gpu_layers, std::optional<int> n_cpu_moe,
                                  bool output_counted) {
  Placement p;
  const int n = !n_gpu_layers || *n_gpu_layers < 0 ? m.layers + 1 : *n_gpu_layers;
  if (output_counted) {
    // b10454 src/llama-model.cpp load_tensors: i_gpu_start = max(n_layer + 1 - ngl, 0) over layers 0..n_layer,
    // the output layer being index n_layer: -ngl N puts the output layer and the last N - 1 repeating layers
    // on the GPU.
    p.first_gpu_layer = std::min(m.layers, std::max(0, m.layers + 1 - n));
    p.output_on_gpu = n >= 1;
  } else {
    p.first_gpu_layer = std::max(0, m.layers - n);
    p.output_on_gpu = n > m.layers;
  }
  p.cpu_moe_layers = n_cpu_moe ? (*n_cpu_moe < 0 ? m.layers : std::min(*n_cpu_moe, m.layers)) : 0;
  p.n_layer = m.layers;
  return p;
}

// src/llama-model.cpp load_tensors: splits[i] = Σ_{j<=i} split[j] / Σ split.
void Placement::split(const std::vector<double>& weights) {
  split_points.clear();
  if (weights.size() <= 1) return;
  double sum = 0;
  for (double w : weights) sum += w;
  double acc = 0;
  for (double w : weights) split_points.push_back((acc += w) / sum);
}

namespace {
// A matmul weight's name within its layer: "blk.12.ffn_up.weight" -> "ffn_up", "output.weight" and the tied output
// -> "output"; "" for what is not a ".weight" (biases, the token_embd lookup is excluded by the caller).
std::string_view matrix_base(std::string_view name) {
  if (name == kTiedOutputCopy) return "output";
  constexpr std::string_view suffix = ".weight";
  if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) return "";
  name.remove_suffix(suffix.size());
  if (name.rfind("blk.", 0) == 0) name.remove_prefix(std::min(name.size(), name.find('.', 4) + 1));
  return name == "token_embd" ? "" : name;
}

// FNV-1a over the host weights: a key for the compute figures built with them (Setup::compute's memo).
std::uint64_t digest(const std::vector<HostWeight>& weights) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ULL;
  };
  for (const auto& w : weights) {
    mix(static_cast<std::uint64_t>(w.il));
    for (char ch : w.base) mix(static_cast<unsigned char>(ch));
    mix(static_cast<std::uint64_t>(w.bytes));
  }
  return h;
}

// "blk.12.attn_q.weight" -> 12; -1 for tensors outside the repeating layers.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int il = 0;
  size_t i = 4;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) il = il * 10 + (name[i] - '0');
  return i > 4 ? il : -1;
}
// -ot patterns run through RE2 (linear time, no recursion: a pattern is user input), searched anywhere in the
// name as llama.cpp's std::regex_search does.
using Overrides = std::vector<std::pair<std::unique_ptr<RE2>, int>>;

std::unique_ptr<RE2> compile_override(const std::string& pattern) {
  RE2::Options o;
  o.set_log_errors(false);
  return std::make_unique<RE2>(pattern, o);
}

// The GPU a tensor lives on, or -1 for the CPU. `name()` is built only when -ot patterns need it.
template <class Name>
int device_of(bool on_host, int il, bool routed_expert, Name&& name, const Placement& p, const Overrides& overrides) {
  if (on_host) return -1;
  if (!overrides.empty()) {
    const std::string& n = name();
    for (const auto& [pattern, device] : overrides)
      if (RE2::PartialMatch(n, *pattern)) return device;
  }
  if (il < 0) return p.device_of(p.n_layer);  // output, output_norm (and a tied output copy)
  if (il < p.cpu_moe_layers && routed_expert) return -1;
  return p.device_of(il);
}

// Weight bytes summed per buffer as tensors are placed.
struct WeightSums {
  Bytes dev = 0, dev_raw = 0, host = 0, host_raw = 0, largest_host_matrix = 0, lookup_host = 0;
  std::vector<Figure> per_device;
  std::vector<HostWeight> host_weights;

  // A host-resident matmul weight (nrows > 1: not a norm or bias; token_embd is read by GET_ROWS) as the GPU's copy
  // of it, for the compute graph. il < 0 is the output layer. The repeating layers' weights are kept once per name,
  // the largest, for every layer (HostWeight::kEveryLayer): layers of one kind are alike, so the peak a copy causes
  // does not depend on which of them are in RAM, and the placement search shares one graph per weight format.
  // The list is in the order the names first appear; `at` holds each name's index in it (-1: not yet there).
  void add_host_weight(int il, const SizedWeights::Matrix& matrix, int n_layer, std::vector<int>& at) {
    int& i = at[static_cast<size_t>(matrix.name)];
    if (i >= 0) {
      host_weights[static_cast<size_t>(i)].bytes = std::max(host_weights[static_cast<size_t>(i)].bytes, matrix.gpu_bytes);
      return;
    }
    if (host_weights.empty()) host_weights.reserve(at.size());  // one per name at most: grown once, not name by name
    i = static_cast<int>(host_weights.size());
    host_weights.push_back({il < 0 ? n_layer : HostWeight::kEveryLayer, std::string(matrix.base), matrix.gpu_bytes});
  }

  void add(int device, const SizedWeights::Part& t) {
    const bool gpu = device >= 0;
    Bytes& sum = gpu ? dev : host;
    Bytes& sum_raw = gpu ? dev_raw : host_raw;
    sum = checked_add(sum, gpu ? t.gpu : t.cpu, "weight bytes");
    sum_raw = checked_add(sum_raw, gpu ? t.gpu_raw : t.cpu_raw, "weight bytes");
    if (gpu) {
      Figure& d = per_device[static_cast<size_t>(device)];
      d.bytes = checked_add(d.bytes, t.gpu, "weight bytes");
      d.unpadded = checked_add(d.unpadded, t.gpu_raw, "weight bytes");
    }
    if (!gpu) largest_host_matrix = std::max(largest_host_matrix, t.largest_cpu_matrix);
    if (!gpu && t.token_embd) lookup_host += t.cpu;
  }
  // Layers' parts summed (SizedLayers) on the one GPU (device 0) or in RAM, as add() adds each of them.
  void add(bool gpu, const SizedLayers::Sums& l) {
    SizedWeights::Part t;
    t.gpu = l.gpu, t.gpu_raw = l.gpu_raw, t.cpu = l.cpu, t.cpu_raw = l.cpu_raw, t.largest_cpu_matrix = l.largest_cpu_matrix;
    add(gpu ? 0 : -1, t);
  }
};

// The output copy of a tied model exists only on another device than token_embd's (an offloaded output layer on
// a GPU); on the CPU backend, or with the output layer in RAM, it is the same tensor. Gemma 3n creates the output
// before token_embd (src/models/gemma3n.cpp load_arch_tensors), so create_tensor's TENSOR_DUPLICATED lookup finds
// nothing and allocates a second copy even in the same buffer (arch rule tied_output_copy).
bool copy_allocated(bool gpu, const BackendSpec& backend, const EngineSpec& engine, const ModelSpec& m) {
  if (gpu && backend.id != "cpu") return true;
  const EngineSpec::ArchRule* arch = engine.arch(m.arch);
  return arch && arch->tied_output_copy;
}
}  // namespace

// Catalog entries of these families have no tensor recipe yet: params × the format's measured bits per weight
// (Llama-3.1-8B, tools/quantize README), a labelled estimate with a wider bound; layers split in proportion under
// partial offload.
WeightBytes weight_bytes_from_params(const ModelSpec& m, const WeightFormat& format, const EngineSpec& engine,
                                     const Placement& placement) {
  if (format.bpw_llama31_8b <= 0)
    throw InputError("--weights", format.id, "has no measured bits per weight to size " + m.name + " from its parameter count");
  const GgmlType& embd_type = engine.type(format.base_type.empty() ? "f16" : format.base_type, "weights " + format.id);
  const Bytes embd = embd_type.block > 1 && m.embd % embd_type.block != 0
                         ? checked_mul(2LL * m.embd, m.vocab, "embedding_length x vocabulary")
                         : checked_mul(embd_type.row_size(m.embd), m.vocab, "embedding_length x vocabulary");
  const Bytes total = checked_bytes(static_cast<double>(m.params) * format.bpw_llama31_8b / 8, "parameter count x bits per weight");
  const Bytes body = std::max<Bytes>(0, total - embd);
  const double gpu_share = static_cast<double>(m.layers - placement.first_gpu_layer) / m.layers;
  const Bytes dev = static_cast<Bytes>(static_cast<double>(body) * gpu_share) + (m.tied_embeddings && placement.output_on_gpu ? embd : 0);
  const Bytes host = embd + (body - static_cast<Bytes>(static_cast<double>(body) * gpu_share));
  auto high = [&](Bytes b) { return checked_bytes(static_cast<double>(b) * (1 + engine.weights_rel_error_fallback), "weights"); };
  WeightBytes out{Figure{dev, dev, high(dev), Accuracy::estimate}, Figure{host, host, high(host), Accuracy::estimate}, {}, 0};
  if (placement.partial()) out.largest_host_matrix = body / std::max(1, m.layers) / 3;  // about one FFN matrix of a layer
  out.lookup_host = embd;
  // several GPUs: the repeating layers in proportion to each device's layers, tied output on the output's device
  const int n = placement.devices();
  std::vector<int> layers_on(static_cast<size_t>(n), 0);
  for (int il = 0; il < m.layers; ++il)
    if (const int d = placement.device_of(il); d >= 0) ++layers_on[static_cast<size_t>(d)];
  for (int d = 0; d < n; ++d) {
    Bytes b = static_cast<Bytes>(static_cast<double>(body) * layers_on[static_cast<size_t>(d)] / m.layers);
    if (m.tied_embeddings && placement.device_of(m.layers) == d) b += embd;
    out.per_device.push_back(Figure{b, b, high(b), Accuracy::estimate});
  }
  return out;
}

namespace {
// The parts and matrices of the layers sized so far, one run per layer class (LayerClass): a later layer of the
// same class gets them again under its own index instead of being typed and sized tensor by tensor.
class LayerRepeats {
 public:
  LayerRepeats(SizedWeights& out, const WeightFormat& f) : out_(out) {
    for (const auto& r : f.rules) sets_.push_back(layer_set(r.layers));
  }

  // Whether layer il repeats a class already sized (its parts then added); else size() must follow.
  bool repeat(const ModelSpec& m, const WeightFormat& f, int il) {
    if (sets_.size() > 64) return false;  // a --data format of more rules than the class has bits: every layer sized
    fill_class(m, f, il);
    for (const Run& run : runs_)
      if (run.cls == scratch_) {
        copy(run, il);
        return true;
      }
    return false;
  }
  // Sizes layer il (of the class repeat() just worked out) with `emit_layer` and remembers its run.
  template <class EmitLayer>
  void size(EmitLayer&& emit_layer) {
    const size_t first_part = out_.parts.size();
    emit_layer();
    runs_.push_back({scratch_, first_part, out_.parts.size() - first_part});
  }

 private:
  struct Run {
    LayerClass cls;
    size_t first_part, n_parts;
  };

  void fill_class(const ModelSpec& m, const WeightFormat& f, int il) {
    scratch_.sliding = m.is_sliding(il), scratch_.moe = m.is_moe_layer(il);
    scratch_.kv_heads = m.kv_heads_per_layer.empty() ? m.kv_heads : m.kv_heads_per_layer.at(static_cast<size_t>(il));
    scratch_.ff = m.ff_at(il);
    scratch_.selected = 0;
    for (size_t i = 0; i < f.rules.size(); ++i)
      if (layer_selected(sets_[i], f.rules[i].first_n, il, m.layers)) scratch_.selected |= std::uint64_t{1} << i;
  }

  // The run's parts under layer il's index; their matrices are the run's (the same names and bytes), not copied.
  void copy(const Run& run, int il) {
    for (size_t i = 0; i < run.n_parts; ++i) {
      SizedWeights::Part p = out_.parts[run.first_part + i];
      p.il = il;
      out_.parts.push_back(p);
    }
  }

  SizedWeights& out_;
  LayerClass scratch_;
  std::vector<Run> runs_;
  std::vector<LayerSet> sets_;  // each format rule's selector
};

// Each matmul weight name's index, the output layer's names apart (placed_weights keeps one host weight per index).
class MatrixNames {
 public:
  int index(bool output_layer, std::string_view base) {
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i].first == output_layer && names_[i].second == base) return static_cast<int>(i);
    names_.emplace_back(output_layer, base);
    return count() - 1;
  }
  int count() const { return static_cast<int>(names_.size()); }

 private:
  std::vector<std::pair<bool, std::string_view>> names_;
};
}  // namespace

SizedWeights sized_weights(const ModelSpec& m, const WeightFormat& format, const EngineSpec& engine, const BackendSpec& backend,
                           bool names) {
  const BackendSpec& cpu = engine.backend("cpu");
  SizedWeights out;
  out.exact = !m.file_tensors.empty();
  // Layer after layer the same shapes recur in the same types: each (type, shape) is sized once per buffer.
  struct Sized {
    const GgmlType* type;
    std::int64_t ne0, nrows;
    Figure gpu, cpu;
  };
  std::vector<Sized> sizes;
  sizes.reserve(64);
  const bool gpu_backend = backend.id != "cpu";
  auto sized = [&](const GgmlType& type, std::int64_t ne0, std::int64_t nrows) -> const Sized& {
    for (const Sized& z : sizes)
      if (z.type == &type && z.ne0 == ne0 && z.nrows == nrows) return z;
    if (sizes.size() >= 64) sizes.pop_back();  // a file of many shapes: the recent ones are the ones that recur
    const Figure on_gpu = tensor_bytes(type, ne0, nrows, backend);
    sizes.push_back({&type, ne0, nrows, on_gpu, &backend == &cpu ? on_gpu : tensor_bytes(type, ne0, nrows, cpu)});
    return sizes.back();
  };
  MatrixNames matrix_names;
  // `matrix`: the tensor's name within its layer when it is a matmul weight the GPU copies from RAM, else "".
  auto keep = [&](int il, std::string_view base, std::string_view matrix, bool on_host, const GgmlType& type, std::int64_t ne0,
                  std::int64_t nrows, auto&& name) {
    SizedWeights::Part t;
    t.il = il;
    t.expert = base.find("_exps") != std::string_view::npos;
    t.on_host = on_host;
    t.token_embd = il < 0 && base == "token_embd";
    t.tied_copy = base == kTiedOutputCopy;
    const Sized& z = sized(type, ne0, nrows);
    const Figure& on_gpu = z.gpu;
    const Figure& on_cpu = z.cpu;
    t.gpu = on_gpu.bytes, t.gpu_raw = on_gpu.unpadded, t.cpu = on_cpu.bytes, t.cpu_raw = on_cpu.unpadded;
    // op offload (ggml-cuda ggml_backend_cuda_device_offload_op): host weights used in matmuls are copied into the
    // GPU compute buffer for batches >= 32; token_embd is a get_rows, not a matmul.
    if (nrows > 1 && !t.token_embd) t.largest_cpu_matrix = t.cpu_raw;
    t.first_matrix = static_cast<int>(out.matrices.size());
    if (nrows > 1 && gpu_backend && !matrix.empty() && matrix != "token_embd") {
      out.matrices.push_back({matrix, on_gpu.bytes, matrix_names.index(il < 0, matrix)});
      out.distinct_names = matrix_names.count();
      t.n_matrices = 1;
    }
    if (names) {
      out.names.push_back(name());
    } else if (!out.parts.empty() && il >= 0 && !on_host && out.parts.back().il == il && out.parts.back().expert == t.expert &&
               !out.parts.back().on_host) {
      SizedWeights::Part& run = out.parts.back();  // placed with the layer's other tensors of its kind
      run.gpu = checked_add(run.gpu, t.gpu, "weight bytes"), run.gpu_raw = checked_add(run.gpu_raw, t.gpu_raw, "weight bytes");
      run.cpu = checked_add(run.cpu, t.cpu, "weight bytes"), run.cpu_raw = checked_add(run.cpu_raw, t.cpu_raw, "weight bytes");
      run.largest_cpu_matrix = std::max(run.largest_cpu_matrix, t.largest_cpu_matrix);
      run.n_matrices += t.n_matrices;  // contiguous: the run is the last part
      return;
    }
    out.parts.push_back(t);
  };
  if (out.exact) {
    const std::string field = "weights " + format.id;
    for (const auto& t : m.file_tensors) {
      const int il = layer_of(t.name);
      // a file's names: "token_embd.weight" is the lookup table, "..._exps" the routed experts
      const std::string_view base = t.name == "token_embd.weight" ? std::string_view("token_embd") : std::string_view(t.name);
      keep(il, base, matrix_base(t.name), t.on_host, engine.type(t.type, field), t.ne0, t.nrows, [&] { return t.name; });
    }
    return out;
  }
  if (format.base_type.empty()) throw InputError("--weights", format.id, "has no per-tensor recipe in data/weights; cannot size it");
  check_has_recipe(m, format);
  RecipeTyper typer(m, format, engine);
  auto keep_recipe = [&](const RecipeTensor& t) {
    const bool matmul = t.suffix == ".weight" || t.base == kTiedOutputCopy;
    const std::string_view matrix = !matmul ? std::string_view() : t.base == kTiedOutputCopy ? std::string_view("output") : t.base;
    keep(t.il, t.base, matrix, t.on_host, t.type, t.ne0, t.nrows, [&] { return tensor_name(t); });
  };
  if (names) {
    for_each_recipe_tensor(m, typer, keep_recipe);
    return out;
  }
  RecipeTensors<decltype(keep_recipe)> recipe(m, typer, keep_recipe);
  LayerRepeats repeats(out, format);
  recipe.head();
  for (int il = 0; il < m.layers; ++il)
    if (!repeats.repeat(m, format, il)) repeats.size([&] { recipe.layer(il); });
  recipe.tail();
  return out;
}

namespace {
// SizedLayers::Copies of the layers' parts (only_experts: of their routed experts' parts).
void sum_copies(const SizedWeights& w, const std::vector<size_t>& first_part, bool only_experts, SizedLayers::Copies& out) {
  if (w.matrices.empty()) return;
  const size_t names = static_cast<size_t>(w.distinct_names), layers = first_part.size() - 1;
  std::vector<Bytes> largest(names, 0);
  std::vector<std::vector<std::pair<int, Bytes>>> growth(names);
  for (size_t k = 0; k < layers; ++k)
    for (size_t i = first_part[k]; i < first_part[k + 1]; ++i) {
      const SizedWeights::Part& p = w.parts[i];
      if (only_experts && !p.expert) continue;
      for (int j = p.first_matrix; j < p.first_matrix + p.n_matrices; ++j) {
        const SizedWeights::Matrix& m = w.matrices[static_cast<size_t>(j)];
        const size_t n = static_cast<size_t>(m.name);
        if (growth[n].empty()) {
          out.first.push_back(static_cast<size_t>(j));
          out.first_layer.push_back(static_cast<int>(k));
        }
        if (growth[n].empty() || m.gpu_bytes > largest[n]) {
          largest[n] = std::max(largest[n], m.gpu_bytes);
          if (!growth[n].empty() && growth[n].back().first == static_cast<int>(k) + 1) growth[n].back().second = largest[n];
          else growth[n].push_back({static_cast<int>(k) + 1, largest[n]});
        }
      }
    }
  for (const auto& g : growth) {
    out.growth_begin.push_back(out.growth.size());
    out.growth.insert(out.growth.end(), g.begin(), g.end());
  }
  out.growth_begin.push_back(out.growth.size());
}

// placed_weights' common case, which a placement search asks at every probe (one GPU, no -ot; the first layers in RAM,
// or only the first layers' routed experts): the input and output layers' parts placed one by one (`place`), the
// repeating layers from their sums and their op-offload copies from each name's largest. False where it does not apply.
template <class Place>
bool placed_from_sums(const SizedWeights& sized, const ModelSpec& m, const Placement& placement, const SizedLayers* layer_sums,
                      bool no_overrides, WeightSums& sums, std::vector<int>& host_weight_at, Place&& place) {
  const size_t layers = static_cast<size_t>(m.layers);
  const size_t in_ram = static_cast<size_t>(std::clamp(placement.first_gpu_layer, 0, m.layers));
  const size_t experts_in_ram = static_cast<size_t>(std::clamp(placement.cpu_moe_layers, 0, m.layers));
  const bool only_experts = experts_in_ram > in_ram;
  if (!layer_sums || layer_sums->first_part.size() != layers + 1 || !no_overrides || placement.devices() != 1 ||
      placement.n_layer != m.layers || (only_experts && (in_ram != 0 || layer_sums->routed_experts.empty())))
    return false;
  const std::vector<size_t>& first = layer_sums->first_part;
  const auto& ram = only_experts ? layer_sums->routed_experts : layer_sums->all;
  const size_t ram_layers = only_experts ? experts_in_ram : in_ram;
  for (size_t i = 0; i < first[0]; ++i) place(i);
  // the RAM layers' copies, each name's largest as the matrices placed one by one would leave it
  const SizedLayers::Copies& copies = only_experts ? layer_sums->expert_copies : layer_sums->all_copies;
  for (size_t k = 0; k < copies.first.size() && copies.first_layer[k] < static_cast<int>(ram_layers); ++k) {
    SizedWeights::Matrix largest = sized.matrices[copies.first[k]];
    largest.gpu_bytes = copies.largest(largest.name, static_cast<int>(ram_layers));
    sums.add_host_weight(copies.first_layer[k], largest, m.layers, host_weight_at);
  }
  // every layer's parts, less those in RAM, are on the GPU (a sum of none adds nothing; the GPU's largest matrix is
  // not read)
  const SizedLayers::Sums &all = layer_sums->all[layers], &host = ram[ram_layers];
  sums.add(false, host);
  sums.add(true, {all.gpu - host.gpu, all.gpu_raw - host.gpu_raw, all.cpu - host.cpu, all.cpu_raw - host.cpu_raw, 0});
  for (size_t i = first[layers]; i < sized.parts.size(); ++i) place(i);
  return true;
}
}  // namespace

Bytes SizedLayers::Copies::largest(int name, int layers_in_ram) const {
  Bytes out = 0;
  const size_t n = static_cast<size_t>(name);
  for (size_t i = growth_begin[n]; i < growth_begin[n + 1] && growth[i].first <= layers_in_ram; ++i) out = growth[i].second;
  return out;
}

std::optional<SizedLayers> sum_layers(const SizedWeights& w, int layers) {
  const auto& parts = w.parts;
  size_t i = 0;
  while (i < parts.size() && parts[i].il < 0) ++i;
  SizedLayers out;
  out.first_part.assign(static_cast<size_t>(std::max(0, layers)) + 1, parts.size());
  std::vector<SizedLayers::Sums> all(out.first_part.size()), experts(out.first_part.size());
  auto add = [](SizedLayers::Sums s, const SizedWeights::Part& p) {
    s.gpu = checked_add(s.gpu, p.gpu, "weight bytes"), s.gpu_raw = checked_add(s.gpu_raw, p.gpu_raw, "weight bytes");
    s.cpu = checked_add(s.cpu, p.cpu, "weight bytes"), s.cpu_raw = checked_add(s.cpu_raw, p.cpu_raw, "weight bytes");
    s.largest_cpu_matrix = std::max(s.largest_cpu_matrix, p.largest_cpu_matrix);
    return s;
  };
  for (size_t k = 0; k + 1 < out.first_part.size(); ++k) {
    out.first_part[k] = i;
    all[k + 1] = all[k], experts[k + 1] = experts[k];
    for (; i < parts.size() && parts[i].il == static_cast<int>(k); ++i) {
      if (parts[i].on_host) return std::nullopt;
      all[k + 1] = add(all[k + 1], parts[i]);
      if (parts[i].expert) experts[k + 1] = add(experts[k + 1], parts[i]);
    }
  }
  out.first_part.back() = i;
  for (size_t j = i; j < parts.size(); ++j)
    if (parts[j].il >= 0) return std::nullopt;  // a layer's part out of order
  sum_copies(w, out.first_part, false, out.all_copies);
  sum_copies(w, out.first_part, true, out.expert_copies);
  out.all = std::move(all);
  if (experts.back().gpu > 0 || experts.back().cpu > 0) out.routed_experts = std::move(experts);
  return out;
}

WeightBytes placed_weights(const SizedWeights& sized, const ModelSpec& m, const EngineSpec& engine, const BackendSpec& backend,
                           const Placement& placement, const SizedLayers* layer_sums) {
  WeightSums sums;
  sums.per_device.resize(static_cast<size_t>(placement.devices()));
  Overrides overrides;
  for (const auto& [pattern, device] : placement.overrides) {
    auto re = compile_override(pattern);
    if (!re->ok()) throw InputError("--override-tensor", pattern, "is not a valid regular expression (RE2 syntax): " + re->error());
    overrides.emplace_back(std::move(re), device);
  }
  if (!overrides.empty() && sized.names.size() != sized.parts.size())
    throw std::logic_error("placed_weights: -ot patterns need the tensors' names (sized_weights with names)");
  std::vector<int> host_weight_at(static_cast<size_t>(sized.distinct_names), -1);
  auto host_matrices = [&](size_t i) {  // part i is in RAM: the GPU's copies of its matrices
    const SizedWeights::Part& t = sized.parts[i];
    for (int k = t.first_matrix; k < t.first_matrix + t.n_matrices; ++k)
      sums.add_host_weight(t.il, sized.matrices[static_cast<size_t>(k)], m.layers, host_weight_at);
  };
  auto place = [&](size_t i) {
    const SizedWeights::Part& t = sized.parts[i];
    const int device = device_of(t.on_host, t.il, t.expert, [&]() -> const std::string& { return sized.names[i]; }, placement, overrides);
    if (device < 0) host_matrices(i);
    if (t.tied_copy && !copy_allocated(device >= 0, backend, engine, m)) return;
    sums.add(device, t);
  };
  if (!placed_from_sums(sized, m, placement, layer_sums, overrides.empty(), sums, host_weight_at, place))
    for (size_t i = 0; i < sized.parts.size(); ++i) place(i);
  WeightBytes out;
  out.largest_host_matrix = sums.largest_host_matrix;
  out.host_weights_digest = digest(sums.host_weights);
  out.host_weights = std::move(sums.host_weights);
  out.lookup_host = sums.lookup_host;
  const Bytes dev = sums.dev, dev_raw = sums.dev_raw, host = sums.host, host_raw = sums.host_raw;
  if (sized.exact) {  // the file's own tensors: what the backend allocates, to the byte
    out.device = Figure::exact(dev, dev_raw);
    out.host = Figure::exact(host, host_raw);
    for (const auto& f : sums.per_device) out.per_device.push_back(Figure::exact(f.bytes, f.unpadded));
    return out;
  }
  // An estimate: a given GGUF may use another mix (imatrix, a newer llama-quantize).
  auto high = [&](Bytes b) { return checked_bytes(static_cast<double>(b) * (1 + engine.weights_rel_error), "weights"); };
  out.device = Figure{dev, dev_raw, high(dev), Accuracy::estimate};
  out.host = Figure{host, host_raw, high(host), Accuracy::estimate};
  for (const auto& f : sums.per_device) out.per_device.push_back(Figure{f.bytes, f.unpadded, high(f.bytes), Accuracy::estimate});
  return out;
}

bool sized_from_params(const ModelSpec& m) { return m.file_tensors.empty() && (m.mla || m.recurrent); }

WeightBytes weight_bytes(const ModelSpec& m, const WeightFormat& format, const EngineSpec& engine, const BackendSpec& backend,
                         const Placement& placement) {
  if (sized_from_params(m) && !placement.overrides.empty())
    throw InputError("--override-tensor", placement.overrides.front().first,
                     m.name + " is sized from its parameter count (no per-tensor recipe): give its GGUF file to place tensors");
  if (sized_from_params(m)) return weight_bytes_from_params(m, format, engine, placement);
  return placed_weights(sized_weights(m, format, engine, backend, !placement.overrides.empty()), m, engine, backend, placement);
}

}  // namespace kvplan

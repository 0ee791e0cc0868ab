// kvplan --model PATH: a GGUF file (split files followed), a Hugging Face config.json, or a folder.
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvplan/checked.hpp"
#include "kvplan/error.hpp"
#include "kvplan/memory.hpp"
#include "kvplan/model_file.hpp"
#include "input_file.hpp"
#include "model_files/validate.hpp"

namespace kvplan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool has_gguf_magic(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

// "name-00001-of-00003.gguf" -> every split, in order (llama.cpp's llama_split_path convention).
std::vector<std::string> split_paths(const fs::path& first, const GgufHeader& h) {
  auto it = h.metadata.find("split.count");
  std::uint64_t count = 1;
  if (it != h.metadata.end()) {
    if (const auto* i = std::get_if<std::int64_t>(&it->second)) count = static_cast<std::uint64_t>(std::max<std::int64_t>(1, *i));
  }
  if (count <= 1) return {first.string()};
  // PREFIX-NNNNN-of-MMMMM.gguf, read by position (a path is user input: no backtracking matcher)
  const std::string name = first.string();
  const std::string tail = "-00000-of-00000.gguf";
  auto digits = [&](size_t at) {
    std::uint64_t v = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::uint64_t{0};
      v = v * 10 + static_cast<std::uint64_t>(name[i] - '0');
    }
    return v;
  };
  const size_t at = name.size() >= tail.size() ? name.size() - tail.size() : 0;
  const bool shaped = name.size() >= tail.size() && name[at] == '-' && name.compare(at + 6, 4, "-of-") == 0 &&
                      name.compare(at + 15, 5, ".gguf") == 0;
  if (!shaped || digits(at + 1) != 1)
    throw InputError("--model", name, fmt::format("is one of {} split files; give the first (-00001-of-{:05d}.gguf)", count, count));
  const std::uint64_t named = digits(at + 10);
  if (count > 9999 || named != count)
    throw InputError("--model", name, fmt::format("split.count is {} but the name says {}", count, name.substr(at + 10, 5)));
  const std::string prefix = name.substr(0, at);
  std::vector<std::string> out;
  for (std::uint64_t i = 1; i <= count; ++i) out.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, i, count));
  return out;
}

std::shared_ptr<const ModelSpec> load_gguf(const fs::path& path, const Catalog& catalog, const EngineSpec& engine) {
  const GgufHeader first = read_gguf_header(path.string());
  std::vector<std::string> paths = split_paths(path, first);
  std::vector<GgufHeader> headers = {first};
  for (size_t i = 1; i < paths.size(); ++i) {
    std::error_code ec;
    if (!fs::exists(paths[i], ec)) throw InputError("--model", paths[i], "split file is missing");
    headers.push_back(read_gguf_header(paths[i]));
  }
  return std::make_shared<const ModelSpec>(model_from_gguf(headers, paths, catalog, engine));
}

// ---- config.json ----

struct ConfigReader {
  const json& cfg;
  ModelSpec& m;
  std::string file;

  const json* find(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (cfg.contains(k) && !cfg[k].is_null()) return &cfg[k];
    return nullptr;
  }
  int integer(std::initializer_list<const char*> keys, int fallback, const char* assumed_why) {
    if (const json* v = find(keys)) {
      if (!v->is_number_integer() || v->get<long long>() < 0 || v->get<long long>() > 1'000'000'000)
        throw InputError(file, *keys.begin(), fmt::format("config.json field is {}, not a non-negative integer", v->dump().substr(0, 40)),
                         {"0..1000000000"});
      m.fields_used.push_back(*keys.begin());
      return v->get<int>();
    }
    if (!assumed_why) throw InputError(file, *keys.begin(), "config.json lacks a required field");
    m.fields_assumed.push_back(fmt::format("{} = {} ({})", *keys.begin(), fallback, assumed_why));
    return fallback;
  }
  bool boolean(const char* key, bool fallback, const char* assumed_why) {
    if (const json* v = find({key}); v && !v->is_boolean())
      throw InputError(file, key, fmt::format("config.json field is {}, not true or false", v->dump().substr(0, 40)), {"true", "false"});
    if (const json* v = find({key}); v && v->is_boolean()) {
      m.fields_used.push_back(key);
      return v->get<bool>();
    }
    m.fields_assumed.push_back(fmt::format("{} = {} ({})", key, fallback ? "true" : "false", assumed_why));
    return fallback;
  }
};

// Hugging Face model_type -> llama.cpp architecture (convert_hf_to_gguf.py's choices).
const std::map<std::string, std::string>& hf_arch_map() {
  static const std::map<std::string, std::string> map = {
      {"llama", "llama"},       {"mistral", "llama"},        {"mixtral", "llama"},     {"qwen2", "qwen2"},
      {"qwen3", "qwen3"},       {"qwen3_moe", "qwen3moe"},   {"gemma2", "gemma2"},     {"gemma3", "gemma3"},
      {"gemma3_text", "gemma3"}, {"phi3", "phi3"},           {"gpt_oss", "gpt-oss"},   {"olmo2", "olmo2"},
      {"cohere", "command-r"},  {"cohere2", "cohere2"},      {"glm4", "glm4"},         {"deepseek_v2", "deepseek2"},
      {"deepseek_v3", "deepseek2"}, {"deepseek_v32", "deepseek32"}, {"qwen3_next", "qwen3next"}, {"mistral3", "mistral3"},
      {"glm4_moe", "glm4moe"},
      {"qwen3_5", "qwen35"},    {"qwen3_5_text", "qwen35"},  {"qwen3_5_moe", "qwen35moe"}, {"qwen3_5_moe_text", "qwen35moe"},
      {"llama4", "llama4"},     {"llama4_text", "llama4"}};
  return map;
}

// A string field of config.json ("" when absent); any other JSON type is refused naming the field.
std::string string_field(const json& obj, const char* key, const std::string& file, const std::string& fallback = {}) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_string())
    throw InputError(file, key, fmt::format("config.json field is {}, not a string", obj[key].dump().substr(0, 40)));
  return obj[key].get<std::string>();
}

// A number field of config.json (`fallback` when absent); it must be finite.
double number_field(const json& obj, const char* key, const std::string& file, double fallback) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_number() || !std::isfinite(obj[key].get<double>()))
    throw InputError(file, key, fmt::format("config.json field is {}, not a finite number", obj[key].dump().substr(0, 40)));
  return obj[key].get<double>();
}

std::shared_ptr<const ModelSpec> load_config_json(const std::string& text, const std::optional<std::string>& index_text,
                                                  const fs::path& config, const Catalog& catalog, const EngineSpec& engine);

// Llama 4 (text_config of Llama4ForConditionalGeneration) as conversion/llama.py Llama4Model writes it: the dense FFN
// is intermediate_size_mlp (feed_forward_length), the experts intermediate_size (expert_feed_forward_length), an MoE
// layer every interleave_moe_layer_step layers with one shared expert of the routed width (llama-model.cpp
// create_tensors, LLM_ARCH_LLAMA4: n_ff_shexp = n_ff_exp); sliding_window 0 is written only when every layer_types
// entry is full_attention. b10454 models/llama4.cpp load_arch_hparams then fixes the chunk at 8192 (engine rule
// window_fixed) and the period at 4 (3 chunked, 1 global): attention_chunk_size and no_rope_layers are read only to
// report where the checkpoint says otherwise, since llama.cpp does not follow them.
void read_llama4(ConfigReader& r, ModelSpec& m, const EngineSpec& engine) {
  const EngineSpec::ArchRule* rule = engine.arch("llama4");
  m.ff = r.integer({"intermediate_size_mlp"}, 0, "no dense FFN");
  if (m.moe) {
    m.moe->expert_ff = r.integer({"intermediate_size"}, 0, nullptr);
    m.moe->shared_ff = m.moe->expert_ff;
    m.moe->layer_step = r.integer({"interleave_moe_layer_step"}, 1, "every layer is MoE (transformers' default)");
  }
  bool all_full = false;
  if (const json* types = r.find({"layer_types"}); types && types->is_array() && !types->empty()) {
    all_full = std::all_of(types->begin(), types->end(), [](const json& t) { return t == "full_attention"; });
    m.fields_used.push_back("layer_types");
  }
  if (!rule || rule->swa_pattern <= 0 || all_full) return;
  m.swa = SlidingWindow{rule->window_fixed > 0 ? rule->window_fixed : 8192, rule->swa_pattern, rule->chunked};
  const int chunk = r.integer({"attention_chunk_size"}, m.swa->window, "llama.cpp's fixed chunk");
  if (chunk != m.swa->window)
    m.fields_assumed.push_back(fmt::format("attention chunk {} (llama.cpp b10454 fixes it; the config says {})", m.swa->window, chunk));
  // transformers' Llama4TextConfig: an empty list means its default, [(il + 1) % 4 != 0 for il]
  if (const json* nope = r.find({"no_rope_layers"}); nope && nope->is_array() && !nope->empty()) {
    bool same = static_cast<int>(nope->size()) == m.layers;
    for (size_t il = 0; same && il < nope->size(); ++il)  // 1 = RoPE (chunked) layer, 0 = NoPE global layer
      same = (*nope)[il].is_number_integer() && ((*nope)[il].get<int>() != 0) == (static_cast<int>(il) % m.swa->pattern < m.swa->pattern - 1);
    if (same) m.fields_used.push_back("no_rope_layers");
    else m.fields_assumed.push_back(fmt::format("every {}th layer global (llama.cpp b10454's fixed period; no_rope_layers differs)", m.swa->pattern));
  }
}

// The text of model.safetensors.index.json beside a config.json, when there is one.
std::optional<std::string> index_beside(const fs::path& config) {
  const fs::path index = config.parent_path() / "model.safetensors.index.json";
  std::error_code ec;
  if (!fs::exists(index, ec)) return std::nullopt;
  return detail::read_text_file(index.string(), "--model", detail::kMaxConfigBytes);
}

std::shared_ptr<const ModelSpec> load_config(const fs::path& config, const Catalog& catalog, const EngineSpec& engine) {
  const std::string text = detail::read_text_file(config.string(), "--model", detail::kMaxConfigBytes);
  return detail::model_from_config_text(text, config.string(), catalog, engine);
}

std::shared_ptr<const ModelSpec> load_config_json(const std::string& text, const std::optional<std::string>& index_text,
                                                  const fs::path& config, const Catalog& catalog, const EngineSpec& engine) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(config.string(), "", fmt::format("malformed JSON at byte {}: {}", e.byte, e.what()));
  }
  if (!root.is_object()) throw InputError(config.string(), "", "config.json must be a JSON object");
  const json& cfg = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  const std::string model_type = string_field(root, "model_type", config.string(), string_field(cfg, "model_type", config.string()));
  const auto arch_it = hf_arch_map().find(model_type);
  if (arch_it == hf_arch_map().end()) {
    std::vector<std::string> known;
    for (const auto& [k, v] : hf_arch_map()) known.push_back(k);
    throw InputError(config.string(), model_type.empty() ? "(none)" : model_type,
                     "model_type is not one kvplan reads from config.json (use the GGUF file instead)", known,
                     closest_match(model_type, known));
  }
  ModelSpec m;
  ConfigReader r{cfg, m, config.string()};
  m.arch = arch_it->second;
  const EngineSpec::ArchRule* rule = engine.arch(m.arch);
  m.family = rule && !rule->family.empty() ? rule->family : m.arch;
  m.id = config.parent_path().filename().string();
  if (m.id.empty()) m.id = "config";
  m.name = detail::printable(string_field(root, "_name_or_path", config.string(), m.id));
  m.source = "config.json at " + config.string();
  m.file_paths = {config.string()};
  m.layers = r.integer({"num_hidden_layers", "n_layer"}, 0, nullptr);
  // conversion/glm.py writes the MTP block as one more GGUF block, and b10454 gives it a KV cache (data/models/glm.yaml)
  if (m.arch == "glm4moe") m.layers += r.integer({"num_nextn_predict_layers"}, 0, "no MTP block");
  // conversion/qwen.py _QwenMtpMixin writes the MTP block(s) too (block_count + mtp_num_hidden_layers); b10454 neither
  // loads nor caches them (engine rule mtp_skipped), but -ngl counts them
  if (rule && rule->mtp_skipped) {
    // conversion/deepseek.py DeepseekV32Model appends num_nextn_predict_layers blocks the same way
    m.mtp_layers = r.integer({"mtp_num_hidden_layers", "num_nextn_predict_layers"}, 0, "no MTP block");
    m.layers += m.mtp_layers;
  }
  m.embd = r.integer({"hidden_size", "n_embd"}, 0, nullptr);
  m.heads = r.integer({"num_attention_heads", "n_head"}, 0, nullptr);
  m.kv_heads = r.integer({"num_key_value_heads"}, m.heads, "no GQA field: one KV head per query head");
  m.head_dim_k = r.integer({"head_dim"}, m.heads > 0 ? m.embd / m.heads : 0, "hidden_size / num_attention_heads");
  m.head_dim_v = m.head_dim_k;
  m.ff = r.integer({"intermediate_size"}, 0, "no dense FFN");
  m.vocab = r.integer({"vocab_size"}, 0, nullptr);
  m.ctx_native = r.integer({"max_position_embeddings"}, 0, nullptr);
  m.tied_embeddings = r.boolean("tie_word_embeddings", false, "transformers' default");
  m.qkv_bias = m.arch == "qwen2" || r.boolean("attention_bias", false, "transformers' default");
  m.qk_norm = m.arch == "qwen3" || m.arch == "qwen3moe" || m.arch == "gemma3" || m.arch == "olmo2" ||
              (m.arch == "glm4moe" && r.boolean("use_qk_norm", false, "transformers' Glm4MoeConfig default"));
  m.post_norms = m.arch == "gemma2" || m.arch == "gemma3" || m.arch == "olmo2";
  m.attn_sinks = m.arch == "gpt-oss";
  if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    throw InputError(config.string(), "num_key_value_heads", "must divide num_attention_heads");
  const int experts = r.integer({"num_local_experts", "num_experts", "n_routed_experts"}, 0, "dense model");
  if (experts > 0) {
    Moe moe;
    moe.experts = experts;
    moe.experts_used = r.integer({"num_experts_per_tok", "experts_per_token"}, 0, nullptr);
    moe.expert_ff = r.integer({"moe_intermediate_size"}, m.ff, "intermediate_size");
    moe.shared_ff = r.integer({"shared_expert_intermediate_size"}, 0, "no shared expert");
    if (moe.shared_ff == 0)  // DeepSeek: n_shared_experts of the routed experts' width
      moe.shared_ff = static_cast<int>(std::min<long long>(static_cast<long long>(r.integer({"n_shared_experts"}, 0, "no shared expert")) * moe.expert_ff,
                                                           1LL << 30));  // range-checked below
    moe.dense_lead = r.integer({"first_k_dense_replace"}, 0, "no leading dense layers");
    m.moe = moe;
  }
  if (m.arch == "llama4") read_llama4(r, m, engine);
  // Sliding window as llama.cpp applies it to this architecture (Llama 4's chunking: read_llama4).
  if (rule && rule->swa_pattern > 0 && m.arch != "llama4") {
    const bool enabled = r.boolean("use_sliding_window", true, "transformers' default");
    const int window = r.integer({"sliding_window"}, 0, "no sliding window");
    if (window < 0) throw InputError(config.string(), "sliding_window", fmt::format("is {}, not a window in tokens", window), {"0 (none) or more"});
    if (enabled && window > 0) m.swa = SlidingWindow{window, rule->swa_pattern, rule->chunked};
  }
  if (rule && rule->mla) {
    Mla mla;
    mla.kv_lora_rank = r.integer({"kv_lora_rank"}, 0, nullptr);
    mla.rope_dim = r.integer({"qk_rope_head_dim"}, 0, nullptr);
    mla.nope_dim = r.integer({"qk_nope_head_dim"}, 0, nullptr);
    mla.v_head_dim = r.integer({"v_head_dim"}, 0, nullptr);
    mla.q_lora_rank = r.integer({"q_lora_rank"}, 0, "no query bottleneck");
    if (rule->dsa_indexer) {  // conversion/deepseek.py DeepseekV32Model.set_gguf_parameters: all three are required
      mla.indexer_heads = r.integer({"index_n_heads"}, 0, nullptr);
      mla.indexer_key_length = r.integer({"index_head_dim"}, 0, nullptr);
      mla.indexer_top_k = r.integer({"index_topk"}, 0, nullptr);
    }
    m.mla = mla;  // convert_hf_to_gguf.py writes the MLA metadata: the latent cache
  }
  if (rule && !rule->recurrent.empty()) {
    Recurrent rec;
    rec.kind = rule->recurrent;
    rec.d_conv = r.integer({"linear_conv_kernel_dim", "conv_kernel", "d_conv"}, 0, nullptr);
    const int v_heads = r.integer({"linear_num_value_heads"}, 0, nullptr);
    const int v_dim = r.integer({"linear_value_head_dim"}, 0, nullptr);
    rec.d_inner = static_cast<int>(std::min<long long>(static_cast<long long>(v_heads) * v_dim, 1LL << 30));  // range-checked below
    rec.d_state = r.integer({"linear_key_head_dim"}, 0, nullptr);
    rec.n_group = r.integer({"linear_num_key_heads"}, 0, nullptr);
    rec.attention_every = r.integer({"full_attention_interval"}, rule->attention_interval, "llama.cpp's default");
    rec.attention_offset = rec.attention_every - 1;
    m.recurrent = rec;
  }
  // gpt-oss ships its experts in MXFP4 (quantization_config.quant_method "mxfp4"); convert_hf_to_gguf.py keeps
  // them so (GptOssModel.dequant_model returns early) and every GGUF of it does (data/models/gpt-oss.yaml).
  if (const json* q = r.find({"quantization_config"}); q && q->is_object() && m.arch == "gpt-oss" && m.moe &&
      string_field(*q, "quant_method", config.string()) == "mxfp4") {
    m.native_expert_type = "mxfp4";
    m.fields_used.push_back("quantization_config.quant_method");
  }
  if (const json* rs = r.find({"rope_scaling"}); rs && rs->is_object()) {
    const std::string file = config.string();
    const std::string type = string_field(*rs, "rope_type", file, string_field(*rs, "type", file));
    const double factor = number_field(*rs, "factor", file, 0.0);
    const double orig_d = number_field(*rs, "original_max_position_embeddings", file, 0);
    if (orig_d < 0 || orig_d > (1 << 24) || orig_d != std::floor(orig_d))
      throw InputError(file, "rope_scaling.original_max_position_embeddings", fmt::format("is {}, not a token count", orig_d), {"0..16777216"});
    if (factor > 1024 || (rs->contains("factor") && !(*rs)["factor"].is_null() && factor <= 0))
      throw InputError(file, "rope_scaling.factor", fmt::format("is {}, not a rope scale factor", factor), {"above 0, at most 1024"});
    const int orig = static_cast<int>(orig_d);
    if ((type == "yarn" || type == "linear") && factor > 1) {
      m.rope_scaling = RopeScaling{type, factor, orig > 0 ? orig : m.ctx_native};
      m.fields_used.push_back("rope_scaling");
      // When the config already states the extended window, that is what the model runs natively.
      const double extended = (orig > 0 && orig < m.ctx_native ? orig : m.ctx_native) * factor;
      if (extended > (1 << 24))
        throw InputError(file, "rope_scaling.factor", fmt::format("extends the context to {:.0f} tokens", extended), {"at most 16777216 tokens"});
      if (orig > 0 && orig < m.ctx_native) m.ctx_native = orig;
      m.ctx_extended = static_cast<int>(extended);
    }
  }
  // Parameters: the safetensors index total_size (bytes) over the checkpoint dtype, else computed later.
  const fs::path index = config.parent_path() / "model.safetensors.index.json";
  if (index_text) {
    const json j = json::parse(*index_text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw InputError(index.string(), "", "malformed JSON (a safetensors index must be a JSON object)");
    if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size") && !j["metadata"]["total_size"].is_null()) {
      const json& ts = j["metadata"]["total_size"];
      const double total = ts.is_number() ? ts.get<double>() : -1;
      if (!(total > 0 && total <= 1e16))  // 10 PB: beyond any checkpoint
        throw InputError(index.string(), "metadata.total_size", fmt::format("is {}, not a checkpoint size in bytes", ts.dump().substr(0, 40)),
                         {"1..1e16"});
      const std::string dtype = string_field(root, "torch_dtype", config.string(), string_field(root, "dtype", config.string(), "bfloat16"));
      const double bytes_per = dtype == "float32" ? 4 : 2;
      m.params = static_cast<std::int64_t>(total / bytes_per);
      m.fields_used.push_back("model.safetensors.index.json metadata.total_size");
    }
  }
  // The numbers as a whole (model_files/validate.hpp), before any is multiplied.
  detail::check_model(m, [&](const std::string& field, const std::string& value, const std::string& problem, const std::string& accepted) {
    throw InputError(config.string(), detail::config_key_of(field), fmt::format("config.json gives {}, which {}", value, problem), {accepted});
  });
  if (m.params == 0) {
    // Σ of the recipe's tensors (the same shapes the weights are sized from).
    const WeightFormat* f16 = catalog.find_weight_format("F16");
    if (f16 && !m.mla && !m.recurrent) {
      for (const auto& t : weight_tensors(m, *f16, engine))
        m.params = checked_add(m.params, checked_mul(t.ne0, t.nrows, "tensor elements"), "parameter count");
      m.fields_assumed.push_back("parameter count computed from the tensor shapes (no safetensors index)");
    } else {
      throw InputError(config.string(), "total_size", "no model.safetensors.index.json beside config.json to count the parameters");
    }
  }
  if (m.layers <= 0 || m.embd <= 0 || m.vocab <= 0 || m.ctx_native <= 0)
    throw InputError(config.string(), "", "config.json has a zero layer count, width, vocabulary or context");
  return std::make_shared<const ModelSpec>(std::move(m));
}

}  // namespace

namespace detail {
std::shared_ptr<const ModelSpec> model_from_config_text(const std::string& text, const std::string& path, const Catalog& catalog,
                                                        const EngineSpec& engine) {
  try {
    return model_from_config_json(text, index_beside(path), path, catalog, engine.id);
  } catch (const json::exception& e) {  // a JSON type kvplan did not check field by field: still bad input
    throw InputError(path, "", std::string("config.json has a field of the wrong JSON type: ") + e.what());
  }
}
}  // namespace detail

std::shared_ptr<const ModelSpec> model_from_config_json(const std::string& config_text, const std::optional<std::string>& index_text,
                                                        const std::string& path, const Catalog& catalog, const std::string& engine) {
  try {
    return load_config_json(config_text, index_text, path, catalog, catalog.engine(engine));
  } catch (const json::exception& e) {  // a JSON type kvplan did not check field by field: still bad input
    throw InputError(path, "", std::string("config.json has a field of the wrong JSON type: ") + e.what());
  }
}

std::shared_ptr<const ModelSpec> load_model_file(const std::string& path, const Catalog& catalog, const std::string& engine_id) {
  const EngineSpec& engine = catalog.engine(engine_id);
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    std::vector<fs::path> ggufs;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.path().extension() == ".gguf") ggufs.push_back(e.path());
    if (fs::exists(p / "config.json", ec)) return load_config(p / "config.json", catalog, engine);
    if (ggufs.size() == 1) return load_gguf(ggufs.front(), catalog, engine);
    throw InputError("--model", path, "folder has no config.json (and not exactly one .gguf)");
  }
  if (!fs::exists(p, ec)) throw InputError("--model", path, "no such file or folder");
  if (!fs::is_regular_file(p, ec)) throw InputError("--model", path, "is not a file or folder");
  if (has_gguf_magic(p)) return load_gguf(p, catalog, engine);
  if (p.extension() == ".json") return load_config(p, catalog, engine);
  if (p.extension() == ".gguf") throw InputError("--model", path, "not a valid GGUF file: no GGUF magic");
  throw InputError("--model", path, "is neither a GGUF file nor a config.json");
}

}  // namespace kvplan

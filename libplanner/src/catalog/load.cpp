// Reads the YAML catalog: embedded data/ first, then each --data / KVPLAN_DATA directory. The one validator: the build
// runs it over data/ alone to make the built-in catalog image (catalog/image.hpp, make_image.cpp).
// Entries of one collection are merged by id, field by field; later sources win.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <cmath>
#include <type_traits>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "catalog/embedded.hpp"
#include "catalog/image.hpp"
#include "catalog/names.hpp"
#include "kvplan/catalog.hpp"
#include "kvplan/error.hpp"
#include "input_file.hpp"
#include "model_files/validate.hpp"
#include "catalog/quality_data.hpp"

namespace kvplan {
namespace {

namespace fs = std::filesystem;

// One catalog entry being assembled from several files.
struct Entry {
  std::string id;
  std::map<std::string, std::pair<YAML::Node, std::string>> fields;  // key -> (value, file it came from)
};

struct Sources {
  std::map<std::string, std::vector<Entry>> collections;  // "models" -> entries in first-seen order
  std::map<std::string, std::pair<YAML::Node, std::string>> quant_fallback;
  std::vector<std::pair<YAML::Node, std::string>> benchmarks, scores;  // data/quality/: (entry, file), read by quality.cpp
};

std::string where(const std::string& file, const YAML::Node& node) {
  const auto mark = node.Mark();
  return mark.line >= 0 ? file + ":" + std::to_string(mark.line + 1) : file;
}

void merge_entry(std::vector<Entry>& entries, const YAML::Node& node, const std::string& file, const std::string& collection) {
  if (!node.IsMap()) throw InputError(where(file, node), "", "each entry of '" + collection + "' must be a mapping");
  const YAML::Node id = node["id"];
  if (!id || !id.IsScalar()) throw InputError(where(file, node), "", "entry of '" + collection + "' has no 'id'");
  const std::string key = id.as<std::string>();
  auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.id == key; });
  if (it == entries.end()) {
    entries.push_back(Entry{key, {}});
    it = std::prev(entries.end());
  }
  for (const auto& kv : node) it->fields[kv.first.as<std::string>()] = {kv.second, file};
}

void add_document_body(Sources& sources, const std::string& text, const std::string& file);

// A data file's shape errors (a key that is a list, an entry that is a scalar) are bad input naming the file.
void add_document(Sources& sources, const std::string& text, const std::string& file) {
  try {
    add_document_body(sources, text, file);
  } catch (const YAML::Exception& e) {
    throw InputError(e.mark.line >= 0 ? file + ":" + std::to_string(e.mark.line + 1) : file, "", "malformed data file: " + e.msg);
  }
}

void add_document_body(Sources& sources, const std::string& text, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(file + ":" + std::to_string(e.mark.line + 1), "", "malformed YAML: " + e.msg);
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) throw InputError(file, "", "a data file must be a mapping at the top level");
  for (const auto& kv : root) {
    const std::string name = kv.first.as<std::string>();
    const YAML::Node& value = kv.second;
    if (name == "models" || name == "gpus" || name == "formats" || name == "tasks" || name == "checkpoints" || name == "interconnects" ||
        name == "licenses") {
      if (!value.IsSequence()) throw InputError(where(file, value), name, "must be a list");
      for (const auto& item : value) merge_entry(sources.collections[name], item, file, name);
    } else if (name == "engine" || name == "prior" || name == "runtime") {
      YAML::Node node = value;
      if (name == "prior" && !node["id"]) node["id"] = "default";
      merge_entry(sources.collections[name], node, file, name);
    } else if (name == "quant_fallback") {
      if (!value.IsMap()) throw InputError(where(file, value), name, "must be a mapping of type -> type");
      for (const auto& f : value) sources.quant_fallback[f.first.as<std::string>()] = {f.second, file};
    } else if (name == "benchmarks" || name == "scores") {
      if (!value.IsSequence()) throw InputError(where(file, value), name, "must be a list");
      for (const auto& item : value) (name == "scores" ? sources.scores : sources.benchmarks).emplace_back(item, file);
    } else if (name == "source" || name == "note") {
      // file-level provenance, documentation only
    } else {
      throw InputError(where(file, kv.first), name, "unknown top-level key",
                       {"models", "gpus", "engine", "runtime", "formats", "tasks", "checkpoints", "interconnects", "prior", "quant_fallback", "benchmarks", "scores",
                        "licenses", "source"});
    }
  }
}

// Typed access to an entry's fields with file:line errors.
class Reader {
 public:
  Reader(const Entry& e, std::string collection) : e_(e), collection_(std::move(collection)) {}

  bool has(const std::string& key) const { return e_.fields.count(key) && !e_.fields.at(key).first.IsNull(); }

  template <typename T>
  T get(const std::string& key) const {
    if (!has(key)) throw InputError(location(), key, collection_ + " entry '" + e_.id + "' lacks required field");
    return convert<T>(key, e_.fields.at(key).first);
  }
  template <typename T>
  T get(const std::string& key, T fallback) const {
    return has(key) ? convert<T>(key, e_.fields.at(key).first) : fallback;
  }
  const YAML::Node* node(const std::string& key) const { return has(key) ? &e_.fields.at(key).first : nullptr; }
  // A field that must be a mapping (rope_scaling, moe, ggml_types, …) or a list (backends, rules, …).
  const YAML::Node* map_node(const std::string& key) const { return shaped(key, true); }
  const YAML::Node* list_node(const std::string& key) const { return shaped(key, false); }
  template <typename T>
  T convert(const std::string& key, const YAML::Node& n) const {
    T out{};
    try {
      out = n.as<T>();
    } catch (const YAML::Exception&) {
      throw InputError(location(key, n), n.IsDefined() ? YAML::Dump(n) : std::string(),
                       collection_ + " '" + e_.id + "' field '" + key + "' has the wrong type");
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(out))
        throw InputError(location(key, n), YAML::Dump(n), collection_ + " '" + e_.id + "' field '" + key + "' must be a finite number");
    }
    return out;
  }
  // A number of a field within [lo, hi] (`what` says what the number is).
  template <typename T>
  void range(const std::string& key, T v, T lo, T hi, const std::string& what = "") const {
    if (v < lo || v > hi)
      throw InputError(location(key), fmt::format("{}", v),
                       fmt::format("{} '{}' field '{}' is out of range{}", collection_, e_.id, key, what.empty() ? "" : " (" + what + ")"),
                       {fmt::format("{}..{}", lo, hi)});
  }
  std::string location(const std::string& key = {}, const YAML::Node& n = YAML::Node()) const {
    if (!key.empty() && e_.fields.count(key)) return where(e_.fields.at(key).second, n.IsDefined() ? n : e_.fields.at(key).first);
    return e_.fields.empty() ? collection_ : e_.fields.begin()->second.second;
  }
  const std::string& id() const { return e_.id; }

 private:
  const YAML::Node* shaped(const std::string& key, bool map) const {
    const YAML::Node* n = node(key);
    if (n && !(map ? n->IsMap() : n->IsSequence()))
      throw InputError(location(key), YAML::Dump(*n).substr(0, 60),
                       collection_ + " '" + e_.id + "' field '" + key + "' must be a " + (map ? "mapping" : "list"));
    return n;
  }
  const Entry& e_;
  std::string collection_;
};

template <typename T>
T sub(const Reader& r, const YAML::Node& map, const std::string& parent, const std::string& key) {
  const YAML::Node n = map[key];
  if (!n) throw InputError(r.location(parent, map), key, "'" + parent + "' of '" + r.id() + "' lacks");
  return r.convert<T>(parent + "." + key, n);
}

void require_positive(const Reader& r, const std::string& key, long long v) {
  if (v <= 0) throw InputError(r.location(key), std::to_string(v), "'" + r.id() + "' field '" + key + "' must be positive");
}

// A key the loader does not know is an error: a misspelt or unsupported field (say an MLA rank)
// must not be silently ignored and sized with defaults.
void require_known_keys(const Entry& e, const std::string& collection, const std::vector<std::string>& known) {
  for (const auto& [key, value] : e.fields)
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw InputError(where(value.second, value.first), key,
                       collection + " entry '" + e.id + "' has an unknown field (kvplan does not model it)", known,
                       closest_match(key, known));
}

ModelSpec read_model(const Reader& r) {
  ModelSpec m;
  m.id = r.id();
  m.name = r.get<std::string>("name", m.id);
  m.hf_id = r.get<std::string>("hf_id", "");
  m.aliases = r.get<std::vector<std::string>>("aliases", {});
  m.arch = r.get<std::string>("arch");
  m.family = r.get<std::string>("family", m.arch);
  m.params = r.get<long long>("params");
  m.layers = r.get<int>("layers");
  m.embd = r.get<int>("embd");
  m.heads = r.get<int>("heads");
  m.kv_heads = r.get<int>("kv_heads");
  m.head_dim_k = r.get<int>("head_dim", m.heads > 0 ? m.embd / m.heads : 0);
  m.head_dim_v = r.get<int>("head_dim_v", m.head_dim_k);
  m.ff = r.get<int>("ff", 0);
  m.vocab = r.get<int>("vocab");
  m.tied_embeddings = r.get<bool>("tied_embeddings", false);
  m.qkv_bias = r.get<bool>("qkv_bias", false);
  m.qk_norm = r.get<bool>("qk_norm", false);
  m.post_norms = r.get<bool>("post_norms", false);
  m.rope = r.get<bool>("rope", true);
  m.attn_sinks = r.get<bool>("attn_sinks", false);
  m.native_expert_type = r.get<std::string>("native_expert_type", "");
  m.ctx_native = r.get<int>("ctx_native");
  m.ctx_extended = r.get<int>("ctx_extended", 0);
  m.source = r.get<std::string>("source");
  m.note = r.get<std::string>("note", "");
  m.license = r.get<std::string>("license", "");
  m.license_source = r.get<std::string>("license_source", "");
  if (!m.license.empty() && m.license_source.empty())
    throw InputError(r.location(), "models '" + m.id + "' license_source", "a model's license needs the source that states it");
  for (auto [key, v] : {std::pair{"params", m.params}, {"layers", m.layers}, {"embd", m.embd}, {"vocab", m.vocab},
                        {"ctx_native", m.ctx_native}})
    require_positive(r, key, v);
  if (m.heads < 0 || m.kv_heads < 0 || m.head_dim_k < 0)
    throw InputError(r.location("heads"), std::to_string(m.heads), "'" + m.id + "' head counts must not be negative");
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    throw InputError(r.location("kv_heads"), std::to_string(m.kv_heads), "'" + m.id + "' heads must be a multiple of kv_heads");
  if (const auto* n = r.map_node("rope_scaling")) {
    m.rope_scaling = RopeScaling{sub<std::string>(r, *n, "rope_scaling", "type"), sub<double>(r, *n, "rope_scaling", "factor"),
                                 sub<int>(r, *n, "rope_scaling", "orig_ctx")};
  }
  if (m.ctx_extended > 0 && !m.rope_scaling)
    throw InputError(r.location("ctx_extended"), std::to_string(m.ctx_extended), "'" + m.id + "' has ctx_extended but no rope_scaling");
  if (const auto* n = r.map_node("swa")) {
    m.swa = SlidingWindow{sub<int>(r, *n, "swa", "window"), sub<int>(r, *n, "swa", "pattern")};
    if (m.swa->window <= 0 || m.swa->pattern < 2)
      throw InputError(r.location("swa"), YAML::Dump(*n), "'" + m.id + "' swa needs window > 0 and pattern >= 2");
  }
  if (m.swa) m.swa->chunked = (*r.map_node("swa"))["chunked"] && r.convert<bool>("swa.chunked", (*r.map_node("swa"))["chunked"]);
  m.kv_heads_per_layer = r.get<std::vector<int>>("kv_heads_per_layer", {});
  m.sliding_layers = r.get<std::vector<int>>("sliding_layers", {});
  m.head_dim_k_swa = r.get<int>("head_dim_swa", 0);
  m.head_dim_v_swa = r.get<int>("head_dim_v_swa", m.head_dim_k_swa);
  m.shared_kv_from = r.get<int>("shared_kv_from", 0);
  m.ff_per_layer = r.get<std::vector<int>>("ff_per_layer", {});
  m.k_eq_v = r.get<bool>("k_eq_v", false);
  m.per_layer_embd = r.get<int>("per_layer_embd", 0);
  if (m.per_layer_embd < 0 || m.per_layer_embd > (1 << 16))
    throw InputError(r.location("per_layer_embd"), std::to_string(m.per_layer_embd), "'" + m.id + "' per_layer_embd must be 0..65536");
  m.mtp_layers = r.get<int>("mtp_layers", 0);
  if (m.mtp_layers < 0 || m.mtp_layers >= m.layers)
    throw InputError(r.location("mtp_layers"), std::to_string(m.mtp_layers), "'" + m.id + "' mtp_layers must be 0 or more and below layers");
  for (auto [key, list] : {std::pair{"kv_heads_per_layer", &m.kv_heads_per_layer}, {"sliding_layers", &m.sliding_layers},
                           {"ff_per_layer", &m.ff_per_layer}})
    if (!list->empty() && static_cast<int>(list->size()) != m.layers)
      throw InputError(r.location(key), std::to_string(list->size()),
                       "'" + m.id + "' per-layer list must have one entry per layer (" + std::to_string(m.layers) + ")");
  for (int f : m.ff_per_layer)
    if (f < 0) throw InputError(r.location("ff_per_layer"), std::to_string(f), "'" + m.id + "' ff_per_layer entries must not be negative");
  if (const auto* n = r.map_node("mla")) {
    Mla mla;
    mla.kv_lora_rank = sub<int>(r, *n, "mla", "kv_lora_rank");
    mla.rope_dim = sub<int>(r, *n, "mla", "rope_dim");
    mla.nope_dim = (*n)["nope_dim"] ? r.convert<int>("mla.nope_dim", (*n)["nope_dim"]) : 0;
    mla.v_head_dim = (*n)["v_head_dim"] ? r.convert<int>("mla.v_head_dim", (*n)["v_head_dim"]) : 0;
    mla.legacy = (*n)["legacy"] && r.convert<bool>("mla.legacy", (*n)["legacy"]);
    mla.q_lora_rank = (*n)["q_lora_rank"] ? r.convert<int>("mla.q_lora_rank", (*n)["q_lora_rank"]) : 0;
    for (auto [key, field] : {std::pair{"indexer_heads", &mla.indexer_heads}, std::pair{"indexer_key_length", &mla.indexer_key_length},
                              std::pair{"indexer_top_k", &mla.indexer_top_k}})
      if ((*n)[key]) *field = r.convert<int>(std::string("mla.") + key, (*n)[key]);
    m.mla = mla;
  }
  if (const auto* n = r.map_node("recurrent")) {
    Recurrent rec;
    rec.kind = sub<std::string>(r, *n, "recurrent", "kind");
    static const std::vector<std::string> kinds = {"mamba", "mamba2", "gdn", "rwkv6", "rwkv7", "lfm2"};
    if (std::find(kinds.begin(), kinds.end(), rec.kind) == kinds.end())
      throw InputError(r.location("recurrent"), rec.kind, "'" + m.id + "' unknown recurrent kind", kinds, closest_match(rec.kind, kinds));
    auto opt = [&](const char* key) { return (*n)[key] ? r.convert<int>(std::string("recurrent.") + key, (*n)[key]) : 0; };
    rec.d_conv = opt("d_conv");
    rec.d_inner = opt("d_inner");
    rec.d_state = opt("d_state");
    rec.n_group = opt("n_group");
    rec.dt_rank = opt("dt_rank");
    rec.head_size = opt("head_size");
    rec.token_shift_count = opt("token_shift_count");
    rec.l_cache = opt("l_cache");
    rec.attention_every = opt("attention_every");
    rec.attention_offset = opt("attention_offset");
    if ((*n)["attention_layers"]) rec.attention_layers = r.convert<std::vector<int>>("recurrent.attention_layers", (*n)["attention_layers"]);
    rec.parallel = (*n)["parallel"] && r.convert<bool>("recurrent.parallel", (*n)["parallel"]);
    if ((*n)["ffn_only_layers"]) rec.ffn_only_layers = r.convert<std::vector<int>>("recurrent.ffn_only_layers", (*n)["ffn_only_layers"]);
    m.recurrent = rec;
  }
  if (const auto* n = r.map_node("moe")) {
    Moe moe;
    moe.experts = sub<int>(r, *n, "moe", "experts");
    moe.experts_used = sub<int>(r, *n, "moe", "experts_used");
    moe.expert_ff = sub<int>(r, *n, "moe", "expert_ff");
    moe.shared_ff = (*n)["shared_ff"] ? r.convert<int>("moe.shared_ff", (*n)["shared_ff"]) : 0;
    moe.dense_lead = (*n)["dense_lead"] ? r.convert<int>("moe.dense_lead", (*n)["dense_lead"]) : 0;
    moe.layer_step = (*n)["layer_step"] ? r.convert<int>("moe.layer_step", (*n)["layer_step"]) : 1;
    m.moe = moe;
  }
  // The numbers as a whole, with the same ranges as a GGUF's or a config.json's (model_files/validate.hpp).
  detail::check_model(m, [&](const std::string& field, const std::string& value, const std::string& problem, const std::string& accepted) {
    const std::string top = field.substr(0, field.find('.'));
    throw InputError(r.location(top), value, "model '" + m.id + "' field '" + field + "' " + problem, {accepted});
  });
  return m;
}

GpuSpec read_gpu(const Reader& r) {
  GpuSpec g;
  g.id = r.id();
  g.name = r.get<std::string>("name", g.id);
  g.aliases = r.get<std::vector<std::string>>("aliases", {});
  g.vendor = r.get<std::string>("vendor", "");
  g.backend = r.get<std::string>("backend");
  g.memory_kind = r.get<std::string>("memory", "dedicated");
  if (g.memory_kind != "dedicated" && g.memory_kind != "unified")
    throw InputError(r.location("memory"), g.memory_kind, "gpu '" + g.id + "' memory must be", {"dedicated", "unified"});
  g.total_mib = r.get<long long>("total_mib");
  r.range<long long>("total_mib", g.total_mib, 1, 1LL << 30, "MiB");
  g.total_source = r.get<std::string>("total_source", "");
  g.working_set_mib = r.get<long long>("working_set_mib", 0);
  r.range<long long>("working_set_mib", g.working_set_mib, 0, g.total_mib, "MiB, at most total_mib");
  g.compute_capability = r.get<std::string>("compute_capability", "");
  g.arch = r.get<std::string>("arch", "");
  g.bandwidth_gbs = r.get<double>("bandwidth_gbs", 0);
  r.range("bandwidth_gbs", g.bandwidth_gbs, 0.0, 1e6, "GB/s");
  g.fp16_tflops = r.get<double>("fp16_tflops", 0);
  if (g.fp16_tflops < 0) throw InputError(r.location("fp16_tflops"), std::to_string(g.fp16_tflops), "must not be negative");
  g.source = r.get<std::string>("source", "");
  return g;
}

Estimate read_estimate(const Reader& r, const YAML::Node& n, const std::string& key) {
  return Estimate{sub<double>(r, n, key, "typical_mib"), sub<double>(r, n, key, "high_mib")};
}

std::vector<EngineSpec::ServerFlag> read_server_flags(const Reader& r) {
  std::vector<EngineSpec::ServerFlag> out;
  const auto* n = r.list_node("server_flags");
  if (!n) return out;
  for (const auto& f : *n) {
    EngineSpec::ServerFlag flag;
    flag.names = sub<std::vector<std::string>>(r, f, "server_flags", "names");
    flag.values = sub<int>(r, f, "server_flags", "values");
    const auto effect = sub<std::string>(r, f, "server_flags", "effect");
    if (effect != "kept" && effect != "unmodelled")
      throw InputError(r.location("server_flags", f) + " server_flags.effect", effect, "is not a flag effect", {"kept", "unmodelled"});
    flag.kept = effect == "kept";
    flag.reason = f["reason"] ? r.convert<std::string>("server_flags.reason", f["reason"]) : "";
    r.range("server_flags", flag.values, 0, 8, "server_flags.values: values after the flag");
    if (flag.names.empty() || (!flag.kept && flag.reason.empty()))
      throw InputError(r.location("server_flags", f), YAML::Dump(f), "a server flag needs names, and a reason when it is unmodelled");
    out.push_back(flag);
  }
  return out;
}

EngineSpec read_engine(const Reader& r) {
  EngineSpec e;
  e.id = r.id();
  e.name = r.get<std::string>("name", e.id);
  e.vendored_by = r.get<std::string>("vendored_by", "");
  e.build_name = r.get<std::string>("build_name");
  e.build = r.get<int>("build", 0);
  e.build_source = r.get<std::string>("build_source");
  if (const auto* n = r.map_node("ggml_types")) {
    for (const auto& kv : *n) {
      GgmlType t;
      t.name = kv.first.as<std::string>();
      t.id = sub<int>(r, kv.second, "ggml_types." + t.name, "id");
      t.block = sub<int>(r, kv.second, "ggml_types." + t.name, "block");
      t.bytes = sub<int>(r, kv.second, "ggml_types." + t.name, "bytes");
      r.range("ggml_types", t.block, 1, 1 << 16, "ggml_types." + t.name + ".block: elements per block");
      r.range("ggml_types", t.bytes, 1, 1 << 20, "ggml_types." + t.name + ".bytes: bytes per block");
      r.range("ggml_types", t.id, 0, 1 << 16, "ggml_types." + t.name + ".id");
      e.ggml_types.push_back(t);
    }
  }
  if (const auto* n = r.map_node("archs")) {
    for (const auto& kv : *n) {
      const std::string name = kv.first.as<std::string>();
      const YAML::Node& a = kv.second;
      EngineSpec::ArchRule rule;
      auto str = [&](const char* key) { return a[key] ? r.convert<std::string>("archs." + name + "." + key, a[key]) : std::string(); };
      auto num = [&](const char* key) { return a[key] ? r.convert<int>("archs." + name + "." + key, a[key]) : 0; };
      rule.swa_pattern = num("swa_pattern");
      rule.chunked = a["chunked"] && r.convert<bool>("archs." + name + ".chunked", a["chunked"]);
      rule.window_fixed = num("window_fixed");
      rule.mla = a["mla"] && r.convert<bool>("archs." + name + ".mla", a["mla"]);
      rule.recurrent = str("recurrent");
      rule.attention = str("attention");
      rule.attention_interval = num("attention_interval");
      rule.gated_query = a["gated_query"] && r.convert<bool>("archs." + name + ".gated_query", a["gated_query"]);
      rule.family = str("family");
      rule.graph = str("graph");
      if (!rule.graph.empty() && rule.graph != "qvk" && rule.graph != "qkv")
        throw InputError(r.location("archs", a["graph"]) + " archs." + name + ".graph", rule.graph, "is not a projection order", {"qvk", "qkv"});
      rule.moe_gating = str("moe_gating");
      rule.rope_switch_key = str("rope_switch_key");
      rule.residual_scale = a["residual_scale"] && r.convert<bool>("archs." + name + ".residual_scale", a["residual_scale"]);
      rule.shared_expert_gate = a["shared_expert_gate"] && r.convert<bool>("archs." + name + ".shared_expert_gate", a["shared_expert_gate"]);
      rule.outputs_after_norm = a["outputs_after_norm"] && r.convert<bool>("archs." + name + ".outputs_after_norm", a["outputs_after_norm"]);
      rule.nextn_skipped = a["nextn_skipped"] && r.convert<bool>("archs." + name + ".nextn_skipped", a["nextn_skipped"]);
      rule.tied_output_copy = a["tied_output_copy"] && r.convert<bool>("archs." + name + ".tied_output_copy", a["tied_output_copy"]);
      rule.kv_from_start = num("kv_from_start");
      rule.per_layer_input = num("per_layer_input");
      rule.altup = num("altup");
      for (const char* key : {"kv_from_start", "per_layer_input", "altup"})
        if (a[key]) r.range("archs", num(key), 1, 1 << 16, "archs." + name + "." + key);
      rule.mtp_skipped = a["mtp_skipped"] && r.convert<bool>("archs." + name + ".mtp_skipped", a["mtp_skipped"]);
      rule.dsa_indexer = a["dsa_indexer"] && r.convert<bool>("archs." + name + ".dsa_indexer", a["dsa_indexer"]);
      if (!rule.moe_gating.empty() && rule.moe_gating != "softmax" && rule.moe_gating != "topk_softmax" &&
          rule.moe_gating != "sigmoid_bias")
        throw InputError(r.location("archs", a["moe_gating"]) + " archs." + name + ".moe_gating", rule.moe_gating, "is not an expert gating",
                         {"softmax", "topk_softmax", "sigmoid_bias"});
      e.archs[name] = rule;
    }
  }
  if (e.archs.empty()) throw InputError(r.location(), e.id, "engine lists no architectures ('archs')");
  e.unmodelled_archs = r.get<std::map<std::string, std::string>>("unmodelled_archs", {});
  e.cache_types = r.get<std::vector<std::string>>("cache_types");
  e.cache_types_offered = r.get<std::vector<std::string>>("cache_types_offered", e.cache_types);
  for (const auto& t : e.cache_types_offered)
    if (std::find(e.cache_types.begin(), e.cache_types.end(), t) == e.cache_types.end())
      throw InputError(r.location("cache_types_offered"), t, "engine '" + e.id + "' offers a cache type it does not accept", e.cache_types);
  e.ctx_pad = r.get<int>("ctx_pad");
  e.ctx_pad_legacy_no_fa = r.get<int>("ctx_pad_legacy_no_fa", e.ctx_pad);
  e.default_ubatch = r.get<int>("default_ubatch");
  e.default_batch = r.get<int>("default_batch");
  e.margin_mib = r.get<long long>("margin_mib", 0);
  e.weights_rel_error = r.get<double>("weights_rel_error", 0);
  e.weights_rel_error_fallback = r.get<double>("weights_rel_error_fallback", e.weights_rel_error);
  // Numbers the memory rules divide by or pad to must be positive (a zero ctx_pad once divided by zero).
  r.range("ctx_pad", e.ctx_pad, 1, 1 << 16, "tokens");
  r.range("ctx_pad_legacy_no_fa", e.ctx_pad_legacy_no_fa, 1, 1 << 16, "tokens");
  r.range("default_ubatch", e.default_ubatch, 1, 65536, "tokens");
  r.range("default_batch", e.default_batch, 1, 1 << 20, "tokens");
  r.range<long long>("margin_mib", e.margin_mib, 0, 1LL << 20, "MiB");
  r.range("weights_rel_error", e.weights_rel_error, 0.0, 10.0, "a fraction");
  r.range("weights_rel_error_fallback", e.weights_rel_error_fallback, 0.0, 10.0, "a fraction");
  e.margin_source = r.get<std::string>("margin_source", "");
  e.server_flags = read_server_flags(r);
  if (const auto* n = r.list_node("backends")) {
    for (const auto& b : *n) {
      BackendSpec s;
      s.id = sub<std::string>(r, b, "backends", "id");
      s.name = b["name"] ? r.convert<std::string>("name", b["name"]) : s.id;
      s.verified = b["verified"] && r.convert<bool>("verified", b["verified"]);
      s.alignment = sub<int>(r, b, "backends." + s.id, "alignment");
      if (s.alignment < 1 || s.alignment > (1 << 20) || (s.alignment & (s.alignment - 1)) != 0)
        throw InputError(r.location("backends", b["alignment"]), std::to_string(s.alignment),
                         "engine '" + e.id + "' backends." + s.id + ".alignment must be a power of two", {"1..1048576"});
      s.matrix_row_padding = b["matrix_row_padding"] ? r.convert<int>("matrix_row_padding", b["matrix_row_padding"]) : 0;
      s.fa_types_default = sub<std::vector<std::string>>(r, b, "backends." + s.id, "fa_types_default");
      s.fa_types_all_quants = b["fa_types_all_quants"] ? r.convert<std::vector<std::string>>("fa_types_all_quants", b["fa_types_all_quants"]) : s.fa_types_default;
      s.fa_mixed_default = b["fa_mixed_default"] && r.convert<bool>("fa_mixed_default", b["fa_mixed_default"]);
      s.fa_mixed_slow = b["fa_mixed_slow"] && r.convert<bool>("fa_mixed_slow", b["fa_mixed_slow"]);
      s.fa_mixed_all_quants = !b["fa_mixed_all_quants"] || r.convert<bool>("fa_mixed_all_quants", b["fa_mixed_all_quants"]);
      s.fa_head_sizes = b["fa_head_sizes"] ? r.convert<std::vector<int>>("fa_head_sizes", b["fa_head_sizes"]) : std::vector<int>{};
      if (b["fa_head_pairs"])
        for (const auto& pair : b["fa_head_pairs"]) {
          const auto v = pair.as<std::vector<int>>();
          if (v.size() != 2) throw InputError(r.location("backends", pair), YAML::Dump(pair), "fa_head_pairs entries are [K, V]");
          s.fa_head_pairs.emplace_back(v[0], v[1]);
        }
      s.context = read_estimate(r, b["context"], "backends." + s.id + ".context");
      s.pool = read_estimate(r, b["pool"], "backends." + s.id + ".pool");
      s.blas_workspace_mib = b["blas_workspace_mib"] ? r.convert<long long>("blas_workspace_mib", b["blas_workspace_mib"]) : 0;
      s.blas_workspace_mib_hopper = b["blas_workspace_mib_hopper"] ? r.convert<long long>("blas_workspace_mib_hopper", b["blas_workspace_mib_hopper"]) : s.blas_workspace_mib;
      s.compute_rel_error = b["compute_rel_error"] ? r.convert<double>("compute_rel_error", b["compute_rel_error"]) : 0.1;
      r.range("backends", s.matrix_row_padding, 0, 1 << 16, "backends." + s.id + ".matrix_row_padding");
      r.range<long long>("backends", s.blas_workspace_mib, 0, 1 << 20, "backends." + s.id + ".blas_workspace_mib");
      r.range<long long>("backends", s.blas_workspace_mib_hopper, 0, 1 << 20, "backends." + s.id + ".blas_workspace_mib_hopper");
      r.range("backends", s.compute_rel_error, 0.0, 10.0, "backends." + s.id + ".compute_rel_error");
      for (const Estimate* est : {&s.context, &s.pool})
        if (est->typical_mib < 0 || est->high_mib < est->typical_mib || est->high_mib > (1 << 20))
          throw InputError(r.location("backends", b), fmt::format("{}..{}", est->typical_mib, est->high_mib),
                           "engine '" + e.id + "' backends." + s.id + " estimates need 0 <= typical_mib <= high_mib <= 1048576");
      s.source = b["source"] ? r.convert<std::string>("source", b["source"]) : "";
      e.backends.push_back(s);
    }
  }
  if (const auto* n = r.list_node("build_rules")) {
    for (const auto& b : *n) {
      BuildRule rule;
      rule.rule = sub<std::string>(r, b, "build_rules", "rule");
      rule.value = b["value"] ? r.convert<std::string>("value", b["value"]) : "";
      rule.source = sub<std::string>(r, b, "build_rules", "source");
      rule.from_build = b["from_build"] ? r.convert<int>("from_build", b["from_build"]) : 0;
      rule.until_build = b["until_build"] ? r.convert<int>("until_build", b["until_build"]) : 0;
      e.build_rules.push_back(rule);
    }
  }
  return e;
}

WeightFormat read_format(const Reader& r) {
  WeightFormat f;
  f.id = r.id();
  f.ftype = r.get<int>("ftype", -1);
  f.base_type = r.get<std::string>("base", "");
  f.source = r.get<std::string>("source", "");
  f.quality_source = r.get<std::string>("quality_source", "");
  f.offered = r.get<bool>("offered", true);
  f.native_only = r.get<std::string>("native_only", "");
  if (const auto* n = r.list_node("rules")) {
    for (const auto& rule : *n) {
      TensorTypeRule t;
      const YAML::Node tensors = rule["tensors"];
      if (!tensors) throw InputError(r.location("rules", rule), "", "format '" + f.id + "' rule lacks 'tensors'");
      t.tensors = tensors.IsSequence() ? tensors.as<std::vector<std::string>>() : std::vector<std::string>{tensors.as<std::string>()};
      t.type = sub<std::string>(r, rule, "rules", "type");
      t.layers = rule["layers"] ? r.convert<std::string>("layers", rule["layers"]) : "all";
      static const std::vector<std::string> selectors = {"all", "more_bits", "first_eighth", "first_sixteenth", "first_n", "middle"};
      if (std::find(selectors.begin(), selectors.end(), t.layers) == selectors.end())
        throw InputError(r.location("rules", rule), t.layers, "format '" + f.id + "' unknown layer selector", selectors);
      t.first_n = rule["first_n"] ? r.convert<int>("first_n", rule["first_n"]) : 0;
      t.min_gqa = rule["min_gqa"] ? r.convert<int>("min_gqa", rule["min_gqa"]) : 0;
      t.experts = rule["experts"] ? r.convert<int>("experts", rule["experts"]) : -1;
      t.min_experts = rule["min_experts"] ? r.convert<int>("min_experts", rule["min_experts"]) : 0;
      t.n_layer = rule["n_layer"] ? r.convert<int>("n_layer", rule["n_layer"]) : 0;
      f.rules.push_back(t);
    }
  }
  const bool has_measured = r.has("rel_loss");
  f.rel_loss = has_measured ? r.get<double>("rel_loss") : r.get<double>("rel_loss_estimate", 0);
  f.rel_loss_estimate = !has_measured || r.get<bool>("estimate", false);
  f.bpw_llama31_8b = r.get<double>("bpw_llama31_8b", 0);
  f.size_gib_llama31_8b = r.get<double>("size_gib_llama31_8b", 0);
  r.range("bpw_llama31_8b", f.bpw_llama31_8b, 0.0, 64.0, "bits per weight");
  r.range("size_gib_llama31_8b", f.size_gib_llama31_8b, 0.0, 1e6, "GiB");
  r.range("rel_loss", f.rel_loss, -1.0, 1e3, "a fraction");
  return f;
}

TaskProfile read_task(const Reader& r) {
  TaskProfile t;
  t.id = r.id();
  t.name = r.get<std::string>("name", t.id);
  t.aliases = r.get<std::vector<std::string>>("aliases", {});
  t.ctx_target = r.get<int>("ctx_target");
  t.ctx_min = r.get<int>("ctx_min");
  r.range("ctx_target", t.ctx_target, 1, 1 << 24, "tokens");
  r.range("ctx_min", t.ctx_min, 1, t.ctx_target, "tokens, at most ctx_target");
  t.metric = r.get<std::string>("metric", "");
  t.summary = r.get<std::string>("summary", "");
  t.source = r.get<std::string>("source");
  t.decode_floor_tps = r.get<double>("decode_floor_tps");
  t.ttft_max_s = r.get<double>("ttft_max_s", 0);
  t.speed_source = r.get<std::string>("speed_source");
  if (!(t.decode_floor_tps > 0) || !(t.ttft_max_s >= 0))
    throw InputError("tasks." + t.id + ".decode_floor_tps", std::to_string(t.decode_floor_tps), "must be tokens per second above 0 (ttft_max_s 0 or more)");
  if (const auto* n = r.list_node("strictness")) {
    for (const auto& b : *n) {
      StrictnessBand band;
      band.upto = b["upto"] && !b["upto"].IsNull() ? r.convert<int>("upto", b["upto"]) : 0;
      band.factor = sub<double>(r, b, "strictness", "factor");
      r.range("strictness", band.factor, 0.0, 1e3, "factor");
      r.range("strictness", band.upto, 0, 1 << 24, "upto");
      t.strictness.push_back(band);
    }
  }
  if (t.strictness.empty()) t.strictness.push_back({0, 1});
  return t;
}

// The prior's keys (docs/priors.md; written by tools/fit_priors.py). An unknown key is an error: a --data override
// that still uses the hand-set parameters of model version 1 must not be silently ignored.
const std::vector<std::string>& prior_keys() {
  static const std::vector<std::string> keys = {
      "id", "source", "note", "model_version", "bits_ref", "size_ref_b", "size_clamp_high",
      "low_bits", "alpha_k_max", "weight_bpw_high", "weight_bpw_mid", "w_high", "w_mid", "w_low", "weight_loss_ref_b",
      "band_free", "band_mild", "band_noticeable", "a_k", "a_v", "beta_k", "beta_v", "r_norot", "beta_norot",
      "size_exponent_k", "size_exponent_v", "size_exponent_norot", "size_knee_b", "ctx_floor", "alpha_k", "alpha_k_size",
      "alpha_v", "interval_low", "interval_high", "types", "families", "measured", "analogs", "evidence"};
  return keys;
}

void require_keys(const Reader& r, const YAML::Node& map, const std::string& list, const std::vector<std::string>& known) {
  if (!map.IsMap()) throw InputError(r.location(list, map), YAML::Dump(map), "each entry of '" + list + "' must be a mapping");
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw InputError(r.location(list, kv.first), key, "'" + list + "' entry has an unknown field", known, closest_match(key, known));
  }
}

PriorParams read_prior(const Reader& r) {
  PriorParams p;
  p.source = r.get<std::string>("source");
  p.model_version = r.get<int>("model_version", p.model_version);
  if (p.model_version != 3)
    throw InputError(r.location("model_version"), std::to_string(p.model_version),
                     "prior model_version must be 3 (the fitted prior of tools/fit_priors.py)");
#define KVPLAN_PRIOR_FIELD(name) p.name = r.get<double>(#name, p.name)
  KVPLAN_PRIOR_FIELD(bits_ref); KVPLAN_PRIOR_FIELD(size_ref_b);
  KVPLAN_PRIOR_FIELD(size_clamp_high); KVPLAN_PRIOR_FIELD(low_bits);
  KVPLAN_PRIOR_FIELD(alpha_k_max); KVPLAN_PRIOR_FIELD(weight_bpw_high); KVPLAN_PRIOR_FIELD(weight_bpw_mid);
  KVPLAN_PRIOR_FIELD(w_high); KVPLAN_PRIOR_FIELD(w_mid); KVPLAN_PRIOR_FIELD(w_low); KVPLAN_PRIOR_FIELD(weight_loss_ref_b);
  KVPLAN_PRIOR_FIELD(band_free); KVPLAN_PRIOR_FIELD(band_mild); KVPLAN_PRIOR_FIELD(band_noticeable);
  KVPLAN_PRIOR_FIELD(a_k); KVPLAN_PRIOR_FIELD(a_v); KVPLAN_PRIOR_FIELD(beta_k); KVPLAN_PRIOR_FIELD(beta_v);
  KVPLAN_PRIOR_FIELD(r_norot); KVPLAN_PRIOR_FIELD(beta_norot); KVPLAN_PRIOR_FIELD(size_exponent_k);
  KVPLAN_PRIOR_FIELD(size_exponent_v); KVPLAN_PRIOR_FIELD(size_exponent_norot); KVPLAN_PRIOR_FIELD(size_knee_b);
  KVPLAN_PRIOR_FIELD(ctx_floor); KVPLAN_PRIOR_FIELD(alpha_k); KVPLAN_PRIOR_FIELD(alpha_k_size); KVPLAN_PRIOR_FIELD(alpha_v);
  KVPLAN_PRIOR_FIELD(interval_low); KVPLAN_PRIOR_FIELD(interval_high);
#undef KVPLAN_PRIOR_FIELD
  // A loss is a product of these: a negative or NaN one would turn every risk upside down.
  auto require = [&](const char* key, double v, double lo, double hi, const char* accepted) {
    if (!(std::isfinite(v) && v >= lo && v <= hi)) throw InputError(r.location(key), fmt::format("{}", v), std::string("prior: ") + key + " out of range", {accepted});
  };
  for (auto [key, v] : {std::pair{"a_k", p.a_k}, {"a_v", p.a_v}, {"beta_k", p.beta_k}, {"beta_v", p.beta_v}, {"size_knee_b", p.size_knee_b},
                        {"ctx_floor", p.ctx_floor}, {"size_ref_b", p.size_ref_b}, {"size_clamp_high", p.size_clamp_high},
                        {"w_high", p.w_high}, {"w_mid", p.w_mid}, {"w_low", p.w_low}, {"weight_loss_ref_b", p.weight_loss_ref_b},
                        {"interval_high", p.interval_high}})
    require(key, v, 1e-12, 1e12, "a positive finite number");
  for (auto [key, v] : {std::pair{"r_norot", p.r_norot}, {"beta_norot", p.beta_norot}, {"size_exponent_k", p.size_exponent_k},
                        {"size_exponent_v", p.size_exponent_v}, {"size_exponent_norot", p.size_exponent_norot},
                        {"alpha_k", p.alpha_k}, {"alpha_k_size", p.alpha_k_size}, {"alpha_v", p.alpha_v}, {"alpha_k_max", p.alpha_k_max}})
    require(key, v, 0, 1e6, "a finite number >= 0");
  require("interval_low", p.interval_low, 1e-12, std::min(1.0, p.interval_high), "in (0, 1] and at most interval_high");
  require("interval_high", p.interval_high, 1, 1e12, ">= 1");
  require("band_free", p.band_free, 1e-12, p.band_mild, "0 < band_free <= band_mild");
  require("band_mild", p.band_mild, p.band_free, p.band_noticeable, "band_free <= band_mild <= band_noticeable");
  require("band_noticeable", p.band_noticeable, p.band_mild, 1e6, "band_mild <= band_noticeable");
  if (const auto* n = r.list_node("types")) {
    for (const auto& t : *n) {
      require_keys(r, t, "types", {"type", "engine", "bits", "k_bits", "v_bits", "rotation", "codebook", "group", "planned", "defective"});
      TypeSensitivity s;
      s.type = sub<std::string>(r, t, "types", "type");
      s.engine = t["engine"] ? r.convert<std::string>("engine", t["engine"]) : "";
      s.bits = sub<double>(r, t, "types", "bits");
      s.k_bits = t["k_bits"] ? r.convert<double>("k_bits", t["k_bits"]) : s.bits;
      s.v_bits = t["v_bits"] ? r.convert<double>("v_bits", t["v_bits"]) : s.bits;
      s.rotation = t["rotation"] ? r.convert<std::string>("rotation", t["rotation"]) : "engine";
      if (s.rotation != "engine" && s.rotation != "builtin" && s.rotation != "robust")
        throw InputError(r.location("types", t["rotation"]), s.rotation, "cache type rotation must be engine, builtin or robust",
                         {"engine", "builtin", "robust"});
      for (double v : {s.bits, s.k_bits, s.v_bits})
        if (!(std::isfinite(v) && v > 0 && v <= 64))
          throw InputError(r.location("types", t["type"]), fmt::format("{}", v), "prior cache type bits must be in (0, 64]");
      s.planned = t["planned"] ? r.convert<bool>("planned", t["planned"]) : true;
      s.codebook = t["codebook"] ? r.convert<std::string>("codebook", t["codebook"]) : (s.quantized() ? "absmax" : "none");
      s.group = t["group"] ? r.convert<int>("group", t["group"]) : 0;
      s.defective = t["defective"] ? r.convert<bool>("defective", t["defective"]) : false;
      p.types.push_back(s);
    }
  }
  if (const auto* n = r.list_node("families")) {
    for (const auto& f : *n) {
      require_keys(r, f, "families", {"family", "k_low_bits_max", "k_low_bits_rot", "k_low_bits_norot", "all_bits", "k_codebooks", "source"});
      FamilyFactor ff;
      ff.family = sub<std::string>(r, f, "families", "family");
      ff.k_low_bits_max = f["k_low_bits_max"] ? r.convert<double>("k_low_bits_max", f["k_low_bits_max"]) : 6;
      ff.k_low_bits_rot = f["k_low_bits_rot"] ? r.convert<double>("k_low_bits_rot", f["k_low_bits_rot"]) : 1;
      ff.k_low_bits_norot = f["k_low_bits_norot"] ? r.convert<double>("k_low_bits_norot", f["k_low_bits_norot"]) : 1;
      ff.all_bits = f["all_bits"] ? r.convert<double>("all_bits", f["all_bits"]) : 1;
      ff.source = sub<std::string>(r, f, "families", "source");
      for (double v : {ff.k_low_bits_rot, ff.k_low_bits_norot, ff.all_bits, ff.k_low_bits_max})
        if (!(std::isfinite(v) && v > 0 && v < 1e12))
          throw InputError(r.location("families", f["family"]), fmt::format("{}", v), "prior family factors must be positive finite numbers");
      if (f["k_codebooks"]) ff.k_codebooks = r.convert<std::vector<std::string>>("k_codebooks", f["k_codebooks"]);
      p.families.push_back(ff);
    }
  }
  if (const auto* n = r.list_node("analogs")) {
    for (const auto& a : *n) {
      require_keys(r, a, "analogs", {"id", "family", "params_b", "k_type", "v_type", "rot_k", "ctx", "loss", "predicted", "upper"});
      AnalogRow row;
      row.id = sub<std::string>(r, a, "analogs", "id");
      row.family = sub<std::string>(r, a, "analogs", "family");
      row.params_b = sub<double>(r, a, "analogs", "params_b");
      row.k_type = sub<std::string>(r, a, "analogs", "k_type");
      row.v_type = sub<std::string>(r, a, "analogs", "v_type");
      row.rot_k = sub<bool>(r, a, "analogs", "rot_k");
      row.ctx = sub<double>(r, a, "analogs", "ctx");
      row.loss = sub<double>(r, a, "analogs", "loss");
      row.predicted = sub<double>(r, a, "analogs", "predicted");
      row.upper = a["upper"] ? r.convert<bool>("upper", a["upper"]) : false;
      if (!(row.params_b > 0 && row.ctx > 0 && std::isfinite(row.params_b) && std::isfinite(row.ctx) && std::isfinite(row.loss) &&
            std::isfinite(row.predicted) && row.predicted >= 0 && row.params_b < 1e7 && row.ctx < 1e9))
        throw InputError(r.location("analogs", a["id"]), row.id, "prior analog rows need finite params_b > 0, ctx > 0, loss and predicted >= 0");
      p.analogs.push_back(row);
    }
  }
  if (const auto* n = r.list_node("measured")) {
    for (const auto& e : *n) {
      require_keys(r, e, "measured", {"id", "k_type", "v_type", "rotation", "family", "params_b", "kind", "text", "source"});
      MeasuredEvidence m;
      m.id = sub<std::string>(r, e, "measured", "id");
      m.k_type = sub<std::string>(r, e, "measured", "k_type");
      m.v_type = sub<std::string>(r, e, "measured", "v_type");
      m.rotation = e["rotation"] ? r.convert<std::string>("rotation", e["rotation"]) : "any";
      m.family = e["family"] ? r.convert<std::string>("family", e["family"]) : "";
      m.params_b = e["params_b"] ? r.convert<double>("params_b", e["params_b"]) : 0;
      m.kind = e["kind"] ? r.convert<std::string>("kind", e["kind"]) : "";
      m.text = sub<std::string>(r, e, "measured", "text");
      m.source = sub<std::string>(r, e, "measured", "source");
      p.measured.push_back(m);
    }
  }
  if (const auto* n = r.list_node("evidence")) {
    for (const auto& e : *n)
      p.evidence.push_back(Evidence{sub<std::string>(r, e, "evidence", "id"), sub<std::string>(r, e, "evidence", "text"),
                                    sub<std::string>(r, e, "evidence", "source")});
  }
  p.index_types();
  return p;
}

MiBRange read_mib_range(const Reader& r, const std::string& key) {
  MiBRange m;
  if (const auto* n = r.map_node(key)) {
    m.typical = sub<double>(r, *n, key, "typical");
    m.high = sub<double>(r, *n, key, "high");
    if (m.typical < 0 || m.high < m.typical)
      throw InputError(r.location(key), YAML::Dump(*n), "'" + key + "' needs 0 <= typical <= high");
  }
  return m;
}

// An engine other than llama.cpp (data/engines/<id>.yaml `runtime:`); docs/engines.md has the model.
RuntimeProfile read_runtime(const Reader& r) {
  RuntimeProfile e;
  e.id = r.id();
  e.name = r.get<std::string>("name");
  e.kind = r.get<std::string>("kind");
  static const std::vector<std::string> kinds = {"ollama", "vllm", "sglang", "exllamav2", "exllamav3", "mlx"};
  if (std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end())
    throw InputError(r.location("kind"), e.kind, "unknown engine kind", kinds, closest_match(e.kind, kinds));
  e.version = r.get<std::string>("version");
  e.source = r.get<std::string>("source");
  e.aliases = r.get<std::vector<std::string>>("aliases", {});
  e.backends = r.get<std::vector<std::string>>("backends");
  e.rules = r.get<std::vector<std::string>>("rules", {});
  e.same_type_kv = r.get<bool>("same_type_kv", true);
  e.mix_unquantized = r.get<bool>("mix_unquantized", true);
  e.unified_kv = r.get<bool>("unified_kv", true);
  e.token_granularity = r.get<int>("token_granularity", 1);
  require_positive(r, "token_granularity", e.token_granularity);
  e.sliding = r.get<std::string>("sliding", "full");
  static const std::vector<std::string> slidings = {"full", "window_plus_batch", "rotating"};
  if (std::find(slidings.begin(), slidings.end(), e.sliding) == slidings.end())
    throw InputError(r.location("sliding"), e.sliding, "unknown sliding-window sizing", slidings, closest_match(e.sliding, slidings));
  e.quantized_sliding = r.get<bool>("quantized_sliding", true);
  e.temp_fp16_layer = r.get<bool>("temp_fp16_layer", false);
  e.memory_fraction = r.get<double>("memory_fraction", 0);
  if (e.memory_fraction < 0 || e.memory_fraction > 1)
    throw InputError(r.location("memory_fraction"), std::to_string(e.memory_fraction), "must be between 0 and 1");
  e.fraction_covers_activations = r.get<bool>("fraction_covers_activations", true);
  e.memory_fraction_source = r.get<std::string>("memory_fraction_source", "");
  e.activation_tokens = r.get<int>("activation_tokens", 0);
  e.activation_tokens_large = r.get<int>("activation_tokens_large", e.activation_tokens);
  r.range("token_granularity", e.token_granularity, 1, 1 << 16, "tokens");
  r.range("activation_tokens", e.activation_tokens, 0, 1 << 20, "tokens");
  r.range("activation_tokens_large", e.activation_tokens_large, 0, 1 << 20, "tokens");
  e.activation_source = r.get<std::string>("activation_source", "");
  e.sampler_bytes_per_logit = r.get<double>("sampler_bytes_per_logit", 8);
  if (!(e.sampler_bytes_per_logit >= 0 && e.sampler_bytes_per_logit <= 1024))
    throw InputError(r.location("sampler_bytes_per_logit"), std::to_string(e.sampler_bytes_per_logit), "must be 0..1024 bytes");
  e.moe_chunk_tokens = r.get<int>("moe_chunk_tokens", 0);
  r.range("moe_chunk_tokens", e.moe_chunk_tokens, 0, 1 << 24, "tokens");
  e.sampler_source = r.get<std::string>("sampler_source", "");
  e.context = read_mib_range(r, "context_mib");
  e.graphs = read_mib_range(r, "graphs_mib");
  e.overhead_source = r.get<std::string>("overhead_source", "");
  e.margin_mib = r.get<std::int64_t>("margin_mib", 0);
  r.range<std::int64_t>("margin_mib", e.margin_mib, 0, 1 << 20, "MiB");
  e.margin_source = r.get<std::string>("margin_source", "");
  const auto* types = r.node("cache_types");
  if (!types || !types->IsSequence() || types->size() == 0)
    throw InputError(r.location(), e.id, "engine lists no cache types ('cache_types')");
  for (const auto& t : *types) {
    require_keys(r, t, "cache_types", {"id", "k_bytes", "v_bytes", "prior_k", "prior_v", "offered", "source"});
    RuntimeCacheType c;
    c.id = sub<std::string>(r, t, "cache_types", "id");
    c.k_bytes = t["k_bytes"] ? r.convert<double>("k_bytes", t["k_bytes"]) : 2;
    c.v_bytes = t["v_bytes"] ? r.convert<double>("v_bytes", t["v_bytes"]) : 2;
    if (c.k_bytes <= 0 || c.v_bytes <= 0 || c.k_bytes > 8 || c.v_bytes > 8) throw InputError(r.location("cache_types", t), c.id, "cache type sizes must be positive");
    c.prior_k = sub<std::string>(r, t, "cache_types", "prior_k");
    c.prior_v = sub<std::string>(r, t, "cache_types", "prior_v");
    c.offered = t["offered"] ? r.convert<bool>("offered", t["offered"]) : true;
    c.source = sub<std::string>(r, t, "cache_types", "source");
    e.cache_types.push_back(c);
  }
  if (const auto* ws = r.list_node("weights")) {
    for (const auto& w : *ws) {
      require_keys(r, w, "weights", {"id", "bpw", "head_bpw", "embed_bpw", "embed_on_host", "experts_only", "quality_as", "flag", "source"});
      WeightFormat f;
      f.id = sub<std::string>(r, w, "weights", "id");
      f.bpw = sub<double>(r, w, "weights", "bpw");
      f.head_bpw = w["head_bpw"] ? r.convert<double>("head_bpw", w["head_bpw"]) : f.bpw;
      f.embed_bpw = w["embed_bpw"] ? r.convert<double>("embed_bpw", w["embed_bpw"]) : f.bpw;
      if (f.bpw <= 0 || f.head_bpw <= 0 || f.embed_bpw <= 0 || f.bpw > 64 || f.head_bpw > 64 || f.embed_bpw > 64) throw InputError(r.location("weights", w), f.id, "bits per weight must be positive");
      f.embed_on_host = w["embed_on_host"] ? r.convert<bool>("embed_on_host", w["embed_on_host"]) : false;
      f.experts_only = w["experts_only"] ? r.convert<bool>("experts_only", w["experts_only"]) : false;
      f.quality_as = sub<std::string>(r, w, "weights", "quality_as");
      f.flag = w["flag"] ? r.convert<std::string>("flag", w["flag"]) : "";
      f.source = sub<std::string>(r, w, "weights", "source");
      e.weight_formats.push_back(f);
    }
  }
  return e;
}

Checkpoint read_checkpoint(const Reader& r) {
  Checkpoint c;
  c.id = r.id();
  c.model = r.get<std::string>("model");
  c.weights = r.get<std::string>("weights");
  c.repo = r.get<std::string>("repo");
  c.native = r.get<bool>("native", false);
  c.source = r.get<std::string>("source");
  if (c.repo.find('/') == std::string::npos || c.repo.find(' ') != std::string::npos)
    throw InputError(r.location("repo"), c.repo, "must be a Hugging Face repo id, owner/name");
  return c;
}

LicenseSpec read_license(const Reader& r) {
  LicenseSpec l;
  l.id = r.id();
  l.name = r.get<std::string>("name");
  l.hub = r.get<std::string>("hub");
  l.osi = r.get<bool>("osi");
  l.source = r.get<std::string>("source");
  return l;
}

// Every model's license names a data/licenses.yaml entry.
void check_model_licenses(const Catalog& c) {
  std::vector<std::string> ids;
  for (const auto& l : c.licenses) ids.push_back(l.id);
  for (const auto& m : c.models)
    if (!m.license.empty() && !c.find_license(m.license))
      throw InputError("models." + m.id + ".license", m.license, "is not a license id of data/licenses.yaml", ids, closest_match(m.license, ids));
}

Interconnect read_interconnect(const Reader& r) {
  Interconnect i;
  i.id = r.id();
  i.name = r.get<std::string>("name");
  i.gbs = r.get<double>("gbs");
  i.allreduce_latency_us = r.get<double>("allreduce_latency_us", 0);
  i.source = r.get<std::string>("source");
  r.range("gbs", i.gbs, 0.001, 1e5, "GB/s");
  r.range("allreduce_latency_us", i.allreduce_latency_us, 0.0, 1e6, "microseconds");
  return i;
}

template <typename T, typename F>
std::vector<T> read_all(const Sources& s, const std::string& collection, F read) {
  std::vector<T> out;
  auto it = s.collections.find(collection);
  if (it == s.collections.end()) return out;
  static const std::map<std::string, std::vector<std::string>> known_keys = {
      {"models", {"id", "name", "hf_id", "aliases", "arch", "family", "params", "layers", "embd", "heads", "kv_heads", "head_dim",
                  "head_dim_v", "ff", "vocab", "tied_embeddings", "qkv_bias", "qk_norm", "post_norms", "attn_sinks", "rope", "ctx_native",
                  "ctx_extended", "rope_scaling", "swa", "moe", "mla", "recurrent", "kv_heads_per_layer", "sliding_layers",
                  "head_dim_swa", "head_dim_v_swa", "shared_kv_from", "ff_per_layer", "k_eq_v", "per_layer_embd", "mtp_layers", "native_expert_type", "license",
                  "license_source",
                  "source", "note"}},
      {"licenses", {"id", "name", "hub", "osi", "source"}},
      {"gpus", {"id", "name", "aliases", "vendor", "backend", "memory", "total_mib", "total_source", "working_set_mib",
                "compute_capability", "arch", "bandwidth_gbs", "fp16_tflops", "source", "note"}},
      {"checkpoints", {"id", "model", "weights", "repo", "native", "source"}},
      {"interconnects", {"id", "name", "gbs", "allreduce_latency_us", "source"}},
      {"tasks", {"id", "name", "aliases", "ctx_target", "ctx_min", "decode_floor_tps", "ttft_max_s", "speed_source", "metric", "strictness", "summary", "source", "note"}},
      {"prior", prior_keys()},
      {"runtime", {"id", "name", "kind", "aliases", "version", "source", "backends", "rules", "same_type_kv", "mix_unquantized",
                   "unified_kv", "token_granularity", "sliding", "quantized_sliding", "temp_fp16_layer", "memory_fraction",
                   "fraction_covers_activations", "memory_fraction_source", "activation_tokens", "activation_tokens_large",
                   "activation_source", "sampler_bytes_per_logit", "moe_chunk_tokens", "sampler_source", "context_mib", "graphs_mib", "overhead_source", "margin_mib", "margin_source",
                   "cache_types", "weights"}}};
  for (const auto& e : it->second) {
    if (auto k = known_keys.find(collection); k != known_keys.end()) require_known_keys(e, collection, k->second);
    const Reader reader(e, collection);
    try {
      out.push_back(read(reader));
    } catch (const YAML::Exception& x) {  // a shape the typed reads did not expect (a list where a mapping belongs, …)
      throw InputError(reader.location(), collection + " '" + e.id + "'", "malformed entry: " + x.msg);
    }
  }
  return out;
}

void add_directory(Sources& sources, const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw InputError("--data", dir, "no such directory");
  if (!fs::is_directory(dir, ec)) throw InputError("--data", dir, "not a directory");
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec))
    // a .yaml that is not a regular file (a link to /dev/zero, a pipe) is refused by read_text_file, not skipped
    if (!entry.is_directory() && (entry.path().extension() == ".yaml" || entry.path().extension() == ".yml"))
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    add_document(sources, detail::read_text_file(f.string(), "--data", detail::kMaxConfigBytes), f.string());
  }
}

void check_unique_names(const Catalog& c) {
  std::map<std::string, std::string> seen;
  auto claim = [&](const std::string& name, const std::string& owner, const std::string& kind) {
    auto [it, inserted] = seen.emplace(kind + ":" + detail::fold(name), owner);
    if (!inserted && it->second != owner)
      throw InputError("data " + kind, name, "name is used by both '" + it->second + "' and '" + owner + "'");
  };
  for (const auto& m : c.models) {
    claim(m.id, m.id, "models");
    claim(m.name, m.id, "models");
    if (!m.hf_id.empty()) {  // the repo's name alone finds the model too (catalog.cpp model_names)
      claim(m.hf_id, m.id, "models");
      claim(m.hf_id.substr(m.hf_id.find('/') + 1), m.id, "models");
    }
    for (const auto& a : m.aliases) claim(a, m.id, "models");
  }
  for (const auto& g : c.gpus) {
    claim(g.id, g.id, "gpus");
    for (const auto& a : g.aliases) claim(a, g.id, "gpus");
  }
}

}  // namespace

namespace detail {
Catalog parse_catalog(const std::vector<std::string>& extra_dirs) {
  Sources sources;
  for (const auto& f : detail::embedded_data()) add_document(sources, f.content, std::string("data/") + f.path);
  for (const auto& d : extra_dirs) add_directory(sources, d);

  Catalog c;
  c.models = read_all<ModelSpec>(sources, "models", read_model);
  c.gpus = read_all<GpuSpec>(sources, "gpus", read_gpu);
  c.engines = read_all<EngineSpec>(sources, "engine", read_engine);
  c.weight_formats = read_all<WeightFormat>(sources, "formats", read_format);
  c.tasks = read_all<TaskProfile>(sources, "tasks", read_task);
  c.runtimes = read_all<RuntimeProfile>(sources, "runtime", read_runtime);
  c.checkpoints = read_all<Checkpoint>(sources, "checkpoints", read_checkpoint);
  c.interconnects = read_all<Interconnect>(sources, "interconnects", read_interconnect);
  c.licenses = read_all<LicenseSpec>(sources, "licenses", read_license);
  check_model_licenses(c);
  auto priors = read_all<PriorParams>(sources, "prior", read_prior);
  if (priors.empty()) throw InputError("data", "prior", "no quality prior in the catalog");
  c.prior = priors.front();
  for (auto& e : c.engines)
    for (const auto& [from, to] : sources.quant_fallback) e.quant_fallback[from] = to.first.as<std::string>();
  // A model's native expert type must be a ggml type the GGUF engine can size (weights.cpp keeps experts in it).
  for (const auto& m : c.models)
    if (!m.native_expert_type.empty() && !c.engines.empty()) (void)c.engines.front().type(m.native_expert_type, "models." + m.id + ".native_expert_type");
  // Engine formats borrow the measured loss of a GGUF format; cache types name prior types.
  for (auto& rt : c.runtimes) {
    for (auto& f : rt.weight_formats) {
      const WeightFormat* like = c.find_weight_format(f.quality_as);
      if (!like) throw InputError("data/engines/" + rt.id + ".yaml", f.quality_as, "weights '" + f.id + "' quality_as names no GGUF format");
      f.rel_loss = like->rel_loss;
      f.rel_loss_estimate = true;
      f.quality_source = "quality of " + like->id + " (nearest GGUF format; " + like->quality_source + ")";
    }
    for (const auto& t : rt.cache_types)
      for (const auto* p : {&t.prior_k, &t.prior_v})
        if (std::none_of(c.prior.types.begin(), c.prior.types.end(), [&](const TypeSensitivity& x) { return x.type == *p; }))
          throw InputError("data/engines/" + rt.id + ".yaml", *p, "cache type '" + t.id + "' names no prior type");
  }
  for (const auto& k : c.checkpoints)
    if (!c.find_model(k.model)) throw InputError("data/engines/checkpoints.yaml", k.model, "checkpoint '" + k.id + "' names no catalog model");
  check_unique_names(c);
  c.benchmarks = detail::read_benchmarks(sources.benchmarks, c);
  c.scores = detail::read_scores(sources.scores, c);
  return c;
}
}  // namespace detail

}  // namespace kvplan

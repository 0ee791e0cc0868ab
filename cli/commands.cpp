// Catalog listings: `kvplan models`, `kvplan gpus`, `kvplan engines`, as text and as JSON (--json; schema/catalog.schema.json).
#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvplan/memory.hpp"
#include "render.hpp"

namespace kvplan::cli {

namespace {
std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
// `kvplan models FILTER`: a case-insensitive substring of the id, name, family, arch or an alias; "moe" and "dense" too.
bool matches(const ModelSpec& m, const std::string& filter) {
  if (filter.empty()) return true;
  const std::string f = lower(filter);
  if (f == "moe" || f == "dense") return (f == "moe") == m.moe.has_value();
  std::string hay = m.id + " " + m.name + " " + m.family + " " + m.arch + " " + m.hf_id;
  for (const auto& a : m.aliases) hay += " " + a;
  return lower(hay).find(f) != std::string::npos;
}
}  // namespace

std::string render_models(const Catalog& c, const std::string& filter, const std::vector<std::string>& licenses) {
  check_license_filter(c, licenses);
  auto listed = [&](const ModelSpec& m) { return matches(m, filter) && license_matches(c, m.license, licenses); };
  size_t id_w = 2, arch_w = 4, fam_w = 6, lic_w = 7;
  for (const auto& m : c.models)
    if (listed(m)) lic_w = std::max(lic_w, m.license.size()), id_w = std::max(id_w, m.id.size()), arch_w = std::max(arch_w, m.arch.size()), fam_w = std::max(fam_w, m.family.size());
  std::string out = fmt::format("{:<{}} {:<{}} {:<{}} {:<{}} {:>9} {:>5} {:>6} {:>4} {:>5} {:>8} {:>8}  {}\n", "id", id_w, "family", fam_w, "arch", arch_w,
                                "license", lic_w, "params", "kind", "layers", "kv", "head", "native", "extended", "name / aliases");
  int shown = 0;
  for (const auto& m : c.models) {
    if (!listed(m)) continue;
    ++shown;
    std::string aliases = m.name;
    for (const auto& a : m.aliases) aliases += ", " + a;
    out += fmt::format("{:<{}} {:<{}} {:<{}} {:<{}} {:>8.2f}B {:>5} {:>6} {:>4} {:>5} {:>8} {:>8}  {}\n", m.id, id_w, m.family, fam_w, m.arch, arch_w,
                       m.license.empty() ? "-" : m.license, lic_w, static_cast<double>(m.params) / 1e9, m.moe ? "moe" : "dense", m.layers, m.kv_heads, m.head_dim_k, m.ctx_native,
                       m.ctx_extended ? std::to_string(m.ctx_extended) : "-", aliases);
  }
  if (shown == 0) out += "(no catalog model matches '" + filter + "')\n";
  return out;
}

std::string render_inspect(const ModelSpec& m) {
  std::string out = fmt::format("Model      {} ({})\n", m.name, m.arch);
  for (const auto& f : m.file_paths) out += fmt::format("File       {}\n", f);
  if (!m.file_format.empty()) out += fmt::format("Format     {}\n", m.file_format);
  out += fmt::format("Shape      {} layers, n_embd {}, {} heads, {} KV heads x {} (K) / {} (V) head size, vocab {}\n", m.layers, m.embd,
                     m.heads, m.kv_heads, m.head_dim_k, m.head_dim_v, m.vocab);
  out += fmt::format("Params     {} ({:.2f}B)\n", m.params, static_cast<double>(m.params) / 1e9);
  out += fmt::format("Context    {} tokens{}\n", m.ctx_native, m.ctx_extended ? fmt::format(", {} with rope scaling", m.ctx_extended) : "");
  const LayerCounts n = layer_counts(m);
  out += fmt::format("Layers     {} full attention, {} {}{}, {} recurrent, {} without a cache\n", n.full, n.sliding,
                     m.swa && m.swa->chunked ? "chunked-attention" : "sliding-window",
                     m.swa ? fmt::format(" ({} tokens)", m.swa->window) : "", n.recurrent, n.none);
  if (m.mla)
    out += fmt::format("MLA        kv_lora_rank {}, rope {}{}\n", m.mla->kv_lora_rank, m.mla->rope_dim,
                       m.mla->legacy ? " (legacy GGUF without MLA metadata: full K and V are cached)" : "");
  if (m.recurrent)
    out += fmt::format("Recurrent  {}: d_conv {}, d_inner {}, d_state {}, n_group {}, head_size {}\n", m.recurrent->kind, m.recurrent->d_conv,
                       m.recurrent->d_inner, m.recurrent->d_state, m.recurrent->n_group, m.recurrent->head_size);
  if (m.moe) out += fmt::format("MoE        {} experts, {} used\n", m.moe->experts, m.moe->experts_used);
  if (!m.file_tensors.empty()) {
    std::map<std::string, std::pair<int, std::int64_t>> by_type;
    for (const auto& t : m.file_tensors) {
      auto& e = by_type[t.type];
      ++e.first;
      e.second += t.ne0 * t.nrows;
    }
    out += fmt::format("Tensors    {}", m.file_tensors.size());
    for (const auto& [type, e] : by_type) out += fmt::format("; {} {} ({} elements)", e.first, type, e.second);
    out += "\n";
  }
  for (const auto& f : m.fields_used) out += "Used       " + f + "\n";
  for (const auto& f : m.fields_assumed) out += "Assumed    " + f + "\n";
  return out;
}

std::string render_gpus(const Catalog& c) {
  size_t id_w = 2, name_w = 4;
  for (const auto& g : c.gpus) id_w = std::max(id_w, g.id.size()), name_w = std::max(name_w, g.name.size());
  std::string out = fmt::format("{:<{}} {:<{}} {:<7} {:<10} {:>10} {:>12}\n", "id", id_w, "name", name_w, "backend", "memory",
                                "total MiB", "usable MiB");
  for (const auto& g : c.gpus)
    out += fmt::format("{:<{}} {:<{}} {:<7} {:<10} {:>10} {:>12}\n", g.id, id_w, g.name, name_w, g.backend, g.memory_kind, g.total_mib,
                       g.unified() && g.working_set_mib > 0 ? std::to_string(g.working_set_mib) : std::to_string(g.total_mib));
  return out;
}

// Every engine with what it accepts and the rules kvplan plans by (data/engines/*.yaml).
std::string render_engines(const Catalog& c) {
  std::string out;
  for (const auto& e : c.engines) {
    out += fmt::format("{}  ({}, as vendored by {})\n", e.id, e.build_name, e.vendored_by);
    std::string types;
    for (const auto& t : e.cache_types) types += (types.empty() ? "" : ", ") + t;
    out += "  cache types  -ctk/-ctv, separately: " + types + "\n";
    std::string backends;
    for (const auto& b : e.backends) backends += (backends.empty() ? "" : ", ") + b.id;
    out += "  backends     " + backends + "\n";
    out += "  rules        quantized V needs flash attention; flash-attention kernels per backend, head size and K/V pair\n"
           "               (CUDA default build: same-type pairs only); quantized caches are Hadamard-rotated from build 8000 on\n";
    out += "  launch       llama-server, llama-cli\n\n";
  }
  for (const auto& e : c.runtimes) {
    out += fmt::format("{}  ({}; {})\n", e.id, e.name, e.version);
    std::string types;
    for (const auto& t : e.cache_types)
      types += (types.empty() ? "" : ", ") + t.id + (t.offered ? "" : " (not offered by default)");
    out += fmt::format("  cache types  {}: {}\n", e.same_type_kv ? "one for K and V" : "K and V separately", types);
    std::string formats;
    for (const auto& f : e.weight_formats) formats += (formats.empty() ? "" : ", ") + f.id;
    out += "  weights      " + (formats.empty() ? std::string("GGUF, as llama.cpp") : formats) + "\n";
    std::string backends;
    for (const auto& b : e.backends) backends += (backends.empty() ? "" : ", ") + b;
    out += "  backends     " + backends + "\n";
    for (const auto& r : e.rules) out += "  rule         " + r + "\n";
    out += "\n";
  }
  return out;
}

namespace {

using ordered_json = nlohmann::ordered_json;

std::string listing(const char* key, ordered_json items) {
  const ordered_json doc = {{"schema_version", kSchemaVersion}, {key, std::move(items)}};
  return doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";  // --data may hold invalid UTF-8
}

}  // namespace

std::string models_json(const Catalog& c, const std::string& filter, const std::vector<std::string>& licenses) {
  check_license_filter(c, licenses);
  ordered_json items = ordered_json::array();
  for (const auto& m : c.models)
    if (matches(m, filter) && license_matches(c, m.license, licenses))
      items.push_back({{"id", m.id},
                     {"name", m.name},
                     {"hf_id", m.hf_id},
                     {"arch", m.arch},
                     {"family", m.family},
                     {"license", m.license.empty() ? ordered_json(nullptr) : ordered_json(m.license)},
                     {"license_source", m.license_source.empty() ? ordered_json(nullptr) : ordered_json(m.license_source)},
                     {"params", m.params},
                     {"layers", m.layers},
                     {"kv_heads", m.kv_heads},
                     {"head_dim_k", m.head_dim_k},
                     {"head_dim_v", m.head_dim_v},
                     {"ctx_native", m.ctx_native},
                     {"ctx_extended", m.ctx_extended ? ordered_json(m.ctx_extended) : ordered_json(nullptr)},
                     {"moe", m.moe ? ordered_json({{"experts", m.moe->experts}, {"experts_used", m.moe->experts_used}}) : ordered_json(nullptr)},
                     {"aliases", m.aliases}});
  return listing("models", std::move(items));
}

std::string gpus_json(const Catalog& c) {
  ordered_json items = ordered_json::array();
  for (const auto& g : c.gpus)
    items.push_back({{"id", g.id},
                     {"name", g.name},
                     {"vendor", g.vendor},
                     {"backend", g.backend},
                     {"memory_kind", g.memory_kind},
                     {"total_mib", g.total_mib},
                     {"usable_mib", g.unified() && g.working_set_mib > 0 ? g.working_set_mib : g.total_mib},
                     {"bandwidth_gbs", g.bandwidth_gbs > 0 ? ordered_json(g.bandwidth_gbs) : ordered_json(nullptr)},
                     {"aliases", g.aliases}});
  return listing("gpus", std::move(items));
}

// llama.cpp builds and the other runtimes alike: what `kvplan engines` prints, as data.
std::string engines_json(const Catalog& c) {
  ordered_json items = ordered_json::array();
  for (const auto& e : c.engines) {
    std::vector<std::string> backends;
    for (const auto& b : e.backends) backends.push_back(b.id);
    items.push_back({{"id", e.id}, {"name", e.name}, {"version", e.build_name}, {"vendored_by", e.vendored_by},
                     {"same_type_kv", false}, {"cache_types", e.cache_types}, {"weight_formats", ordered_json::array()},
                     {"backends", backends}, {"rules", ordered_json::array()}});
  }
  for (const auto& e : c.runtimes) {
    std::vector<std::string> types, formats;
    for (const auto& t : e.cache_types)
      if (t.offered) types.push_back(t.id);
    for (const auto& f : e.weight_formats) formats.push_back(f.id);
    items.push_back({{"id", e.id}, {"name", e.name}, {"version", e.version}, {"vendored_by", nullptr},
                     {"same_type_kv", e.same_type_kv}, {"cache_types", types}, {"weight_formats", formats},
                     {"backends", e.backends}, {"rules", e.rules}});
  }
  return listing("engines", std::move(items));
}

}  // namespace kvplan::cli

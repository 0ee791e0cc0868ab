// Catalog lookups: names, aliases and HF ids, matched without regard to case and punctuation.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "kvplan/catalog.hpp"
#include "kvplan/error.hpp"
#include "catalog/names.hpp"
#include "priors/prior.hpp"

namespace kvplan {
namespace {

using detail::fold;
using detail::folds_to;

template <typename T, typename NamesOf>
const T* find_by_name(const std::vector<T>& items, const std::string& wanted, NamesOf names_of) {
  // an id as written is canonical and wins over another entry's name that folds to it (and needs no fold per name)
  for (const auto& item : items)
    if (item.id == wanted) return &item;
  const std::string key = fold(wanted);
  if (key.empty()) return nullptr;
  for (const auto& item : items)
    for (const auto& n : names_of(item))
      if (folds_to(n, key)) return &item;
  return nullptr;
}

template <typename T, typename NamesOf>
const T& lookup(const std::vector<T>& items, const std::string& wanted, const std::string& field, const std::string& what,
                NamesOf names_of) {
  if (const T* found = find_by_name(items, wanted, names_of)) return *found;
  std::vector<std::string> ids, all_names;
  for (const auto& item : items) {
    ids.push_back(item.id);
    for (const auto& n : names_of(item)) all_names.push_back(n);
  }
  std::string suggestion = closest_match(wanted, all_names);
  if (!suggestion.empty()) {  // suggest the canonical id of the closest name
    const T* hit = find_by_name(items, suggestion, names_of);
    suggestion = hit ? hit->id : suggestion;
  }
  throw InputError(field, wanted, "unknown " + what, ids, suggestion);
}

std::vector<std::string> model_names(const ModelSpec& m) {
  std::vector<std::string> n = {m.id, m.name};
  if (!m.hf_id.empty()) {
    n.push_back(m.hf_id);
    n.push_back(m.hf_id.substr(m.hf_id.find('/') + 1));
  }
  n.insert(n.end(), m.aliases.begin(), m.aliases.end());
  return n;
}
std::vector<std::string> task_names(const TaskProfile& t) {
  std::vector<std::string> n = {t.id};
  n.insert(n.end(), t.aliases.begin(), t.aliases.end());
  return n;
}
std::vector<std::string> id_only(const auto& x) { return {x.id}; }

// Ollama tags end in the weight format: qwen3:30b-a3b-q4_K_M, gemma3:27b-it-qat, gpt-oss:20b-fp16.
bool is_weight_suffix(std::string w) {
  std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::tolower(c); });
  if (w == "fp16" || w == "f16" || w == "bf16" || w == "fp32" || w == "f32" || w == "qat" || w == "mxfp4") return true;
  const size_t digit = w.rfind("iq", 0) == 0 ? 2 : w.rfind('q', 0) == 0 ? 1 : std::string::npos;
  return digit != std::string::npos && digit < w.size() && std::isdigit(static_cast<unsigned char>(w[digit]));
}

// "qwen3:30b-a3b-q4_K_M" -> "qwen3:30b-a3b"; a name without an Ollama tag, or without a format at its end, is kept.
std::string without_weight_suffix(const std::string& name) {
  std::string out = name;
  const size_t colon = out.find(':');
  if (colon == std::string::npos) return out;
  for (size_t dash = out.rfind('-'); dash != std::string::npos && dash > colon; dash = out.rfind('-'))
    if (is_weight_suffix(out.substr(dash + 1))) out.resize(dash);
    else break;
  return out;
}

// A model name read as its line and the size it names: "qwen3:30b" = {qwen3, 30e9}, "Qwen3-30B-A3B" =
// {qwen3, 30e9, moe}, "gemma-3-27b-it" = {gemma3, 27e9}, "mixtral-8x7b" = {mixtral, 56e9, moe}.
struct NameParts {
  std::string line;
  double size = 0;
  bool moe = false;
};
// A positive decimal number ("30", "0.6"), or nothing.
std::optional<double> decimal(const std::string& s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) || s.find_first_not_of("0123456789.") != std::string::npos)
    return std::nullopt;
  const double v = std::strtod(s.c_str(), nullptr);
  return v > 0 ? std::optional<double>(v) : std::nullopt;
}
// A size word: 30b, 0.6b, 270m, e2b (Gemma 3n effective), 8x7b (experts x size); a3b names active parameters.
// Returns false for any other word.
bool read_size(const std::string& w, NameParts& p) {
  if (w.size() < 2 || (w.back() != 'b' && w.back() != 'm')) return false;
  const double scale = w.back() == 'b' ? 1e9 : 1e6;
  const std::string body = w.substr(0, w.size() - 1);
  if (const auto v = decimal(body[0] == 'e' ? body.substr(1) : body)) {
    p.size = *v * scale;
    return true;
  }
  if (body[0] == 'a' && decimal(body.substr(1))) {
    p.moe = true;
    return true;
  }
  const size_t x = body.find('x');
  if (x == std::string::npos) return false;
  const auto experts = decimal(body.substr(0, x)), each = decimal(body.substr(x + 1));
  if (!experts || !each) return false;
  p.size = *experts * *each * scale;
  p.moe = true;
  return true;
}
NameParts name_parts(const std::string& name) {
  std::string s = without_weight_suffix(name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (char& c : s)
    if (!detail::kept_in_fold(c)) c = ' ';  // the characters a name keeps when folded; the rest split words
  NameParts p;
  std::istringstream words(s);
  bool sized = false;
  for (std::string w; words >> w;)
    if (read_size(w, p)) sized = sized || p.size > 0;
    else if (!sized) p.line += w;
  return p;
}

// Among models of the same line (one edit allowed per four characters), the one nearest the named size, MoE
// for a name that says MoE ("-a3b", "8x7b"): "qwen3:31b" suggests Qwen3-30B-A3B, not the dense Qwen3-32B.
// "" when the name gives no size or no line is near; the caller then falls back to the closest spelling.
std::string model_of_nearest_size(const std::vector<ModelSpec>& models, const std::string& wanted) {
  if (wanted.size() > 256) return {};  // no typo: a name that long is not worth a quadratic distance per model
  const NameParts want = name_parts(wanted);
  if (want.size <= 0 || want.line.empty()) return {};
  size_t best_line = std::numeric_limits<size_t>::max();
  std::vector<const ModelSpec*> same_line;
  for (const auto& m : models) {
    size_t d = std::numeric_limits<size_t>::max();
    for (const auto& n : model_names(m)) d = std::min(d, edit_distance(want.line, name_parts(n).line));
    if (d < best_line) {
      best_line = d;
      same_line.clear();
    }
    if (d == best_line) same_line.push_back(&m);
  }
  if (best_line > std::max<size_t>(1, want.line.size() / 4)) return {};
  if (want.moe && std::any_of(same_line.begin(), same_line.end(), [](const ModelSpec* m) { return m->moe.has_value(); }))
    std::erase_if(same_line, [](const ModelSpec* m) { return !m->moe; });
  const ModelSpec* best = nullptr;
  double best_gap = 0;
  size_t best_spelling = 0;
  for (const ModelSpec* m : same_line) {
    const double gap = std::abs(std::log(static_cast<double>(m->params) / want.size));
    const size_t spelling = edit_distance(fold(wanted), fold(m->id));
    if (best && (gap > best_gap + 1e-9 || (gap > best_gap - 1e-9 && spelling >= best_spelling))) continue;
    best = m;
    best_gap = gap;
    best_spelling = spelling;
  }
  return best ? best->id : std::string{};
}

}  // namespace

const ModelSpec* Catalog::find_model(const std::string& name) const {
  // Data files name models by their canonical id: found without folding every name of every model (a what-fits
  // ranking asks thousands of times).
  for (const auto& m : models)
    if (m.id == name) return &m;
  if (const ModelSpec* m = find_by_name(models, name, model_names)) return m;
  return find_by_name(models, without_weight_suffix(name), model_names);
}
const ModelSpec& Catalog::model(const std::string& name, const std::string& field) const {
  if (const ModelSpec* m = find_model(name)) return *m;
  const std::string nearest = model_of_nearest_size(models, name);
  if (nearest.empty()) return lookup(models, name, field, "model (see `kvplan models`)", model_names);
  std::vector<std::string> ids;
  for (const auto& m : models) ids.push_back(m.id);
  throw InputError(field, name, "unknown model (see `kvplan models`)", ids, nearest);
}
const RuntimeProfile* Catalog::runtime(const std::string& name, const std::string& field) const {
  auto names = [](const RuntimeProfile& e) {
    std::vector<std::string> n = {e.id, e.name};
    n.insert(n.end(), e.aliases.begin(), e.aliases.end());
    return n;
  };
  if (find_by_name(engines, name, [](const EngineSpec& e) { return std::vector<std::string>{e.id, "llama-server", "llama-cli"}; }))
    return nullptr;
  if (const RuntimeProfile* found = find_by_name(runtimes, name, names)) return found;
  const auto ids = engine_ids();
  throw InputError(field, name, "unknown engine (see `kvplan engines`)", ids, closest_match(name, ids));
}
std::vector<std::string> Catalog::engine_ids() const {
  std::vector<std::string> ids;
  for (const auto& e : engines) ids.push_back(e.id);
  for (const auto& e : runtimes) ids.push_back(e.id);
  return ids;
}
const EngineSpec& Catalog::engine(const std::string& id, const std::string& field) const {
  return lookup(engines, id, field, "engine", [](const EngineSpec& e) { return id_only(e); });
}
const WeightFormat* Catalog::ollama_tag_weights(const std::string& tag) const {
  const size_t colon = tag.find(':'), dash = tag.rfind('-');
  if (colon == std::string::npos || dash == std::string::npos || dash < colon) return nullptr;
  std::string suffix = tag.substr(dash + 1);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (suffix == "FP16" || suffix == "FP32") suffix = suffix == "FP16" ? "F16" : "F32";  // Ollama spells the formats FP16/FP32
  return find_weight_format(suffix);
}

const WeightFormat* Catalog::find_weight_format(const std::string& id) const {
  return find_by_name(weight_formats, id, [](const WeightFormat& f) { return id_only(f); });
}
const LicenseSpec* Catalog::find_license(const std::string& id) const {
  for (const auto& l : licenses)
    if (l.id == id) return &l;
  return nullptr;
}
const WeightFormat& Catalog::weight_format(const std::string& id, const std::string& field) const {
  return lookup(weight_formats, id, field, "weight format", [](const WeightFormat& f) { return id_only(f); });
}
const TaskProfile& Catalog::task(const std::string& id, const std::string& field) const {
  return lookup(tasks, id, field, "task", task_names);
}

const GgmlType& EngineSpec::type(const std::string& name, const std::string& field) const {
  for (const auto& t : ggml_types)
    if (t.name == name) return t;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& t : ggml_types) {
    std::string tl = t.name;
    std::transform(tl.begin(), tl.end(), tl.begin(), [](unsigned char c) { return std::tolower(c); });
    if (tl == lower) return t;
  }
  std::vector<std::string> names;
  for (const auto& t : ggml_types) names.push_back(t.name);
  throw InputError(field, name, "unknown ggml type", names, closest_match(name, names));
}

const BackendSpec& EngineSpec::backend(const std::string& id) const {
  for (const auto& b : backends)
    if (b.id == id) return b;
  std::vector<std::string> ids;
  for (const auto& b : backends) ids.push_back(b.id);
  throw InputError("backend", id, "unknown backend for " + name, ids, closest_match(id, ids));
}

bool EngineSpec::rule_holds(const std::string& rule) const {
  for (const auto& r : build_rules)
    if (r.rule == rule) return build >= r.from_build && (r.until_build == 0 || build <= r.until_build);
  return false;
}

double TaskProfile::factor_at(int ctx) const {
  for (const auto& band : strictness)
    if (band.upto == 0 || ctx <= band.upto) return band.factor;
  return strictness.back().factor;
}

const TypeSensitivity& PriorParams::type(const std::string& name) const {
  for (const auto& t : types)
    if (t.type == name) return t;
  std::vector<std::string> names;
  for (const auto& t : types) names.push_back(t.type);
  throw InputError("prior", name, "no sensitivity for cache type", names, closest_match(name, names));
}
void PriorParams::index_types() {
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i].type == name) return static_cast<int>(i);
    return -1;
  };
  for (auto& a : analogs) a.k_index = index_of(a.k_type), a.v_index = index_of(a.v_type), a.own_factor = family(a.family) != nullptr;
  for (auto& m : measured) m.k_index = index_of(m.k_type), m.v_index = index_of(m.v_type);
  analog_families.clear();
  for (auto& a : analogs) {
    auto fam = std::find(analog_families.begin(), analog_families.end(), a.family);
    if (fam == analog_families.end()) fam = analog_families.insert(fam, a.family);
    a.family_index = static_cast<int>(fam - analog_families.begin());
  }
  analog_index = priors::index_analogs(*this);
}
const TypeSensitivity* PriorParams::type_at(int index, const std::string& name) const {
  if (index >= 0 && static_cast<size_t>(index) < types.size() && types[static_cast<size_t>(index)].type == name)
    return &types[static_cast<size_t>(index)];
  for (const auto& t : types)
    if (t.type == name) return &t;
  return nullptr;
}
const FamilyFactor* PriorParams::family(const std::string& name) const {
  for (const auto& f : families)
    if (f.family == name) return &f;
  return nullptr;
}
const Evidence* PriorParams::find_evidence(const std::string& id) const {
  for (const auto& e : evidence)
    if (e.id == id) return &e;
  return nullptr;
}
const ModelCalibration* PriorParams::calibration(const std::string& model_id) const {
  for (const auto& c : calibrations)
    if (c.model == model_id) return &c;
  return nullptr;
}

}  // namespace kvplan

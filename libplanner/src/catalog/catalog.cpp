// Catalog lookups: names, aliases and HF ids, matched without regard to case and punctuation.
#include <algorithm>
#include <cctype>

#include "kvplan/catalog.hpp"
#include "kvplan/error.hpp"

namespace kvplan {
namespace {

std::string fold(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <typename T, typename NamesOf>
const T* find_by_name(const std::vector<T>& items, const std::string& wanted, NamesOf names_of) {
  const std::string key = fold(wanted);
  if (key.empty()) return nullptr;
  for (const auto& item : items)
    for (const auto& n : names_of(item))
      if (fold(n) == key) return &item;
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

}  // namespace

const ModelSpec* Catalog::find_model(const std::string& name) const { return find_by_name(models, name, model_names); }
const ModelSpec& Catalog::model(const std::string& name, const std::string& field) const {
  return lookup(models, name, field, "model (see `kvplan models`)", model_names);
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
const WeightFormat* Catalog::find_weight_format(const std::string& id) const {
  return find_by_name(weight_formats, id, [](const WeightFormat& f) { return id_only(f); });
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

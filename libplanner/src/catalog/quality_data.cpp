// data/quality/: benchmark definitions and the published scores of catalog models, validated as the rest of the
// catalog is (file:line, the value, what is accepted, "did you mean").
#include "catalog/quality_data.hpp"

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "kvplan/error.hpp"

namespace kvplan::detail {
namespace {

std::string at(const std::string& file, const YAML::Node& n) {
  const auto mark = n.Mark();
  return mark.line >= 0 ? file + ":" + std::to_string(mark.line + 1) : file;
}

// A mapping entry's fields with the errors of load.cpp's Reader: required, typed, known keys only.
class Fields {
 public:
  Fields(const YAML::Node& n, std::string file, std::string what, std::vector<std::string> known)
      : n_(n), file_(std::move(file)), what_(std::move(what)) {
    if (!n.IsMap()) throw InputError(at(file_, n), "", "each entry of '" + what_ + "' must be a mapping");
    for (const auto& kv : n) {
      const auto key = kv.first.as<std::string>();
      if (std::find(known.begin(), known.end(), key) == known.end())
        throw InputError(at(file_, kv.first), key, what_ + " entry has an unknown field", known, closest_match(key, known));
    }
  }
  bool has(const std::string& key) const { return n_[key] && !n_[key].IsNull(); }
  template <typename T>
  T get(const std::string& key) const {
    if (!has(key)) throw InputError(at(file_, n_), key, what_ + " entry lacks required field");
    try {
      return n_[key].as<T>();
    } catch (const YAML::Exception&) {
      throw InputError(where(key), YAML::Dump(n_[key]), what_ + " field '" + key + "' has the wrong type");
    }
  }
  std::string text(const std::string& key) const { return has(key) ? get<std::string>(key) : std::string(); }
  std::string where(const std::string& key) const { return at(file_, n_[key] ? n_[key] : n_); }
  const std::string& file() const { return file_; }

 private:
  YAML::Node n_;
  std::string file_, what_;
};

std::vector<std::string> ids_of(const auto& list) {
  std::vector<std::string> out;
  for (const auto& x : list) out.push_back(x.id);
  return out;
}

}  // namespace

std::vector<Benchmark> read_benchmarks(const QualityEntries& entries, const Catalog& c) {
  std::vector<Benchmark> out;
  const auto task_ids = ids_of(c.tasks);
  for (const auto& [node, file] : entries) {
    const Fields f(node, file, "benchmarks", {"id", "name", "tasks", "metric", "scale", "higher_is_better", "pool_variants", "source", "note"});
    Benchmark b;
    b.id = f.get<std::string>("id");
    if (std::any_of(out.begin(), out.end(), [&](const Benchmark& x) { return x.id == b.id; }))
      throw InputError(f.where("id"), b.id, "benchmark id is defined twice (define each benchmark once, in one file)");
    b.name = f.has("name") ? f.get<std::string>("name") : b.id;
    b.metric = f.get<std::string>("metric");
    b.source = f.get<std::string>("source");
    b.higher_is_better = f.has("higher_is_better") ? f.get<bool>("higher_is_better") : true;
    b.pool_variants = f.has("pool_variants") ? f.get<bool>("pool_variants") : true;
    b.tasks = f.get<std::vector<std::string>>("tasks");
    for (const auto& t : b.tasks)
      if (std::find(task_ids.begin(), task_ids.end(), t) == task_ids.end())
        throw InputError(f.where("tasks"), t, "benchmark '" + b.id + "' names an unknown task", task_ids, closest_match(t, task_ids));
    const auto scale = f.get<std::vector<double>>("scale");
    if (scale.size() != 2 || !std::isfinite(scale[0]) || !std::isfinite(scale[1]) || !(scale[0] < scale[1]))
      throw InputError(f.where("scale"), YAML::Dump(node["scale"]), "benchmark '" + b.id + "' scale must be [low, high] with low < high");
    b.scale_low = scale[0];
    b.scale_high = scale[1];
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<BenchmarkScore> read_scores(const QualityEntries& entries, const Catalog& c) {
  std::vector<BenchmarkScore> out;
  std::set<std::tuple<std::string, std::string, std::string, std::string>> seen;
  const auto model_ids = ids_of(c.models), bench_ids = ids_of(c.benchmarks);
  static const std::regex date_re(R"(\d{4}-\d{2}(-\d{2})?)");
  for (const auto& [node, file] : entries) {
    const Fields f(node, file, "scores", {"model", "benchmark", "variant", "mode", "value", "source", "date", "note"});
    BenchmarkScore s;
    s.model = f.get<std::string>("model");
    if (std::find(model_ids.begin(), model_ids.end(), s.model) == model_ids.end())
      throw InputError(f.where("model"), s.model, "quality score names no catalog model (use the id of data/models/*.yaml)", {},
                       closest_match(s.model, model_ids));
    s.benchmark = f.get<std::string>("benchmark");
    const auto b = std::find_if(c.benchmarks.begin(), c.benchmarks.end(), [&](const Benchmark& x) { return x.id == s.benchmark; });
    if (b == c.benchmarks.end())
      throw InputError(f.where("benchmark"), s.benchmark, "quality score names an unknown benchmark (define it under benchmarks:)",
                       bench_ids, closest_match(s.benchmark, bench_ids));
    s.variant = f.text("variant");
    s.mode = f.text("mode");
    if (!s.mode.empty() && s.mode != "thinking" && s.mode != "non-thinking")
      throw InputError(f.where("mode"), s.mode, "quality score mode must be thinking, non-thinking or null", {"thinking", "non-thinking", "null"});
    s.value = f.get<double>("value");
    if (!std::isfinite(s.value) || s.value < b->scale_low || s.value > b->scale_high)
      throw InputError(f.where("value"), fmt::format("{}", s.value), "quality score of " + s.model + " on " + s.benchmark + " is outside the benchmark's scale",
                       {fmt::format("{}..{}", b->scale_low, b->scale_high)});
    s.source = f.get<std::string>("source");
    s.date = f.get<std::string>("date");
    if (!std::regex_match(s.date, date_re)) throw InputError(f.where("date"), s.date, "quality score date must be YYYY-MM or YYYY-MM-DD");
    s.note = f.text("note");
    s.file = f.where("value");
    if (!seen.emplace(s.model, s.benchmark, s.variant, s.mode).second)
      throw InputError(f.where("model"), s.model + " / " + s.benchmark + " / " + (s.variant.empty() ? "null" : s.variant) + " / " +
                                             (s.mode.empty() ? "null" : s.mode),
                       "duplicate quality score (one row per model, benchmark, variant and mode)");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvplan::detail

// A model's quality for a task from published benchmark figures (data/quality/; docs/ranking.md §8).
// Benchmarks differ in scale and in which models report them, so each (benchmark, variant) column is put on the
// scale of the task's reference column by linear equating over the models measured on both (Kolen & Brennan,
// "Test Equating, Scaling, and Linking", 3rd ed. 2014, ch. 2: x → μ_ref + σ_ref/σ_x · (x − μ_x) over a common group),
// and a model's figure is the mean of its columns on that scale. Missing figures fall back on size (§8.3).
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>
#include <optional>
#include <regex>
#include <set>

#include "kvplan/whatfits.hpp"

namespace kvplan {
namespace {

constexpr int kMinOverlap = 3;
constexpr double kSizeWeight = 1;  // the size fit's weight in a measured figure, as one benchmark column  // models in common before a column is linked: fewer give no spread to equate on

struct Cell {  // one model's figure on one column, oriented so that higher is better
  std::string model, column;
  double value = 0;
  std::string pooled;  // the column of the benchmark's variants pooled (same mode), for variants too rare to link
  bool poolable = true;  // false: the benchmark's variants are different tests (Benchmark::pool_variants)
};

// A column is one test condition: the benchmark, its variant, and thinking mode apart from the rest (a reasoning
// trace lifts some benchmarks by 30 points; equating puts thinking columns on the same scale as the others).
std::string column_id(const BenchmarkScore& s) {
  return (s.variant.empty() ? s.benchmark : s.benchmark + " " + s.variant) + (s.mode == "thinking" ? " (thinking)" : "");
}

// Per (model, column) one figure, oriented so that higher is better (a null and a non-thinking row of one
// condition: the first in file order).
std::vector<Cell> task_cells(const Catalog& c, const std::string& task) {
  std::map<std::pair<std::string, std::string>, Cell> pick;
  for (const auto& s : c.scores) {
    const auto b = std::find_if(c.benchmarks.begin(), c.benchmarks.end(), [&](const Benchmark& x) { return x.id == s.benchmark; });
    if (b == c.benchmarks.end() || std::find(b->tasks.begin(), b->tasks.end(), task) == b->tasks.end()) continue;
    const double v = b->higher_is_better ? s.value : b->scale_low + b->scale_high - s.value;
    const std::string pooled = s.benchmark + " (variants pooled)" + (s.mode == "thinking" ? " (thinking)" : "");
    pick.emplace(std::make_pair(s.model, column_id(s)), Cell{s.model, column_id(s), v, pooled, b->pool_variants});
  }
  std::vector<Cell> out;
  for (const auto& [key, cell] : pick) out.push_back(cell);
  return out;
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }
double stdev(const std::vector<double>& v) {
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size()));
}

// The mean of each model's linked columns on the reference scale.
std::map<std::string, double> composite(const std::vector<Cell>& cells, const std::map<std::string, QualityScale::Column>& linked) {
  std::map<std::string, std::pair<double, int>> sum;
  for (const auto& cell : cells)
    if (auto it = linked.find(cell.column); it != linked.end()) {
      auto& s = sum[cell.model];
      s.first += it->second.shift + it->second.slope * cell.value;
      ++s.second;
    }
  std::map<std::string, double> out;
  for (const auto& [m, s] : sum) out[m] = s.first / s.second;
  return out;
}

// Links the unlinked column with the most models in common with the scale, if one has enough; false when none.
bool link_next(const std::vector<Cell>& cells, const std::set<std::string>& columns, std::map<std::string, QualityScale::Column>& linked) {
  const auto scale = composite(cells, linked);
  std::string best;
  std::vector<double> best_x, best_y;
  for (const auto& col : columns) {
    if (linked.count(col)) continue;
    std::vector<double> x, y;
    for (const auto& cell : cells)
      if (cell.column == col)
        if (auto it = scale.find(cell.model); it != scale.end()) x.push_back(cell.value), y.push_back(it->second);
    if (x.size() > best_x.size() || (x.size() == best_x.size() && !x.empty() && col < best)) best = col, best_x = x, best_y = y;
  }
  if (static_cast<int>(best_x.size()) < kMinOverlap) return false;
  const double sx = stdev(best_x), sy = stdev(best_y);
  QualityScale::Column c{best, 1, 0, static_cast<int>(best_x.size()), true};
  if (sx > 0 && sy > 0) c.slope = sy / sx;  // no spread on one side: a mean shift alone
  c.shift = mean(best_y) - c.slope * mean(best_x);
  c.mean_x = mean(best_x), c.sd_x = sx;
  double ss = 0;
  for (size_t i = 0; i < best_x.size(); ++i) ss += std::pow(best_y[i] - c.shift - c.slope * best_x[i], 2);
  c.residual = std::sqrt(ss / static_cast<double>(best_x.size()));
  linked[best] = c;
  return true;
}

// Least-squares fit of y on x: (intercept, slope); the slope is kept at 0 or more (a larger model of the same
// training is not worse; a negative fit is noise in few points).
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() < 2) return {x.empty() ? 0 : y.front(), 0};
  const double mx = mean(x), my = mean(y);
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  const double slope = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  return {my - slope * mx, slope};
}

std::string figure_list(const std::vector<Cell>& cells, const std::string& model) {
  std::string out;
  for (const auto& cell : cells)
    if (cell.model == model) out += fmt::format("{}{} {:g}", out.empty() ? "" : ", ", cell.column, cell.value);
  return out;
}

// The cells of columns left unlinked, pooled by benchmark and mode across their variants: one cell per model, the
// mean of its unlinked variants (variant names are free text: "v3", "v3 leaderboard, FC", "0-shot").
std::vector<Cell> pool_unlinked(const std::vector<Cell>& cells, const std::map<std::string, QualityScale::Column>& linked) {
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> sum;
  for (const auto& cell : cells)
    if (!linked.count(cell.column) && cell.poolable) {
      auto& s = sum[{cell.model, cell.pooled}];
      s.first += cell.value;
      ++s.second;
    }
  std::vector<Cell> out;
  for (const auto& [key, s] : sum) out.push_back({key.first, key.second, s.first / s.second, key.second});
  return out;
}

// The document a figure was read from: the first web address in its source (a model card, a report, a leaderboard
// page or repository), without the scheme; the whole text when it names none.
std::string source_document(const std::string& source) {
  static const std::regex address(R"((?:https?://)?((?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}/[^\s,;'"()]*))");
  std::smatch m;
  if (!std::regex_search(source, m, address)) return source;
  std::string doc = m[1].str();
  while (!doc.empty() && (doc.back() == '.' || doc.back() == '/')) doc.pop_back();
  return doc;
}

// The documents behind a model's figures on the columns its measured figure uses (a pooled column: the variants in it).
std::set<std::string> documents(const QualityScale& q, const Catalog& c, const std::string& model) {
  std::set<std::string> used(q.measured.at(model).benchmarks.begin(), q.measured.at(model).benchmarks.end()), out;
  for (const auto& s : c.scores) {
    if (s.model != model) continue;
    const std::string pooled = s.benchmark + " (variants pooled)" + (s.mode == "thinking" ? " (thinking)" : "");
    if (used.count(column_id(s)) || used.count(pooled)) out.insert(source_document(s.source));
  }
  return out;
}


// Root mean square of y about the line: how far a model's figure lies from what its size predicts.
double rms_residual(const std::vector<double>& x, const std::vector<double>& y, double intercept, double slope) {
  if (x.empty()) return 0;
  double ss = 0;
  for (size_t i = 0; i < x.size(); ++i) ss += std::pow(y[i] - intercept - slope * x[i], 2);
  return std::sqrt(ss / static_cast<double>(x.size()));
}

double log_size(const ModelSpec& m) { return std::log(effective_params(m) / 1e9); }

// How a figure grows with ln(effective parameters) within a family: the fixed-effects ("within") estimator, the slope
// of figure on size after each family's own mean is taken out (Wooldridge, Introductory Econometrics, ch. 14). The
// catalog-wide slope mixes size with vendor (the large models come from other vendors than the small ones) and
// carried a 4B relative's figure to 27B at a rate no family shows. Kept at 0 or more; 0 without two sizes in a family.
double within_family_slope(const QualityScale& q, const Catalog& c) {
  std::map<std::string, std::vector<std::pair<double, double>>> by_family;
  for (const auto& [id, figure] : q.measured)
    if (const ModelSpec* m = c.find_model(id); m && !m->family.empty()) by_family[m->family].emplace_back(log_size(*m), figure.value);
  double sxy = 0, sxx = 0;
  for (const auto& [family, points] : by_family) {
    double mx = 0, my = 0;
    for (const auto& [x, y] : points) mx += x / points.size(), my += y / points.size();
    for (const auto& [x, y] : points) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
  }
  return sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
}

// The family rule (§8 fallback 1) for `m` from its measured relatives other than `m` itself: each relative's figure
// moved along the within-family size slope, averaged; the relatives named in `kin`. Empty: no measured relative.
std::optional<double> family_figure(const QualityScale& q, const Catalog& c, const ModelSpec& m, double slope, std::string* kin = nullptr) {
  double sum = 0;
  int n = 0;
  for (const auto& [id, figure] : q.measured) {
    const ModelSpec* other = c.find_model(id);
    if (!other || id == m.id || m.family.empty() || other->family != m.family) continue;
    sum += figure.value + slope * (log_size(m) - log_size(*other));
    ++n;
    if (kin) *kin += (kin->empty() ? "" : ", ") + id;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// How far the family rule misses a measured figure: each measured model with a measured relative estimated from its
// relatives alone (left out in turn), root mean square of the misses; the size fit's deviation when fewer than 3.
double family_rule_error(const QualityScale& q, const Catalog& c) {
  const double slope = within_family_slope(q, c);
  double ss = 0;
  int n = 0;
  for (const auto& [id, figure] : q.measured)
    if (const ModelSpec* m = c.find_model(id))
      if (const auto guess = family_figure(q, c, *m, slope)) ss += std::pow(figure.value - *guess, 2), ++n;
  return n >= 3 ? std::sqrt(ss / n) : q.size_sd;
}

}  // namespace

// A line fitted over k points predicts at x with an error growing with the distance from their mean (the usual
// prediction error of a fitted line): residual · √((1 + z²)/k), z = (x − mean)/sd. The reference itself: none.
double QualityScale::Column::error_at(double x) const {
  if (overlap == 0) return 0;
  const double z = sd_x > 0 ? (x - mean_x) / sd_x : 0;
  return residual * std::sqrt((1 + z * z) / overlap);
}

double active_params(const ModelSpec& m) {
  if (!m.moe || m.moe->experts <= 0) return static_cast<double>(m.params);
  // routed expert weights: gate, up and down projections of expert_ff per expert, in every MoE layer
  const double per_expert = 3.0 * m.embd * m.moe->expert_ff;
  const double moe_layers = std::max(0, m.layers - m.mtp_layers - m.moe->dense_lead);
  const double idle = per_expert * moe_layers * (m.moe->experts - m.moe->experts_used);
  return std::max(static_cast<double>(m.params) - idle, static_cast<double>(m.params) / m.moe->experts);
}

// The MoE rule of thumb: a dense model of √(total · active) parameters matches it (Mistral AI's Mixtral 8x7B
// release compares it with dense Llama 2 70B at ~13B active of 47B; widely used as a first-order equivalence).
double effective_params(const ModelSpec& m) {
  return m.moe ? std::sqrt(static_cast<double>(m.params) * active_params(m)) : static_cast<double>(m.params);
}

QualityScale quality_scale(const Catalog& c, const std::string& task_id) {
  QualityScale q;
  q.task = task_id;
  const auto cells = task_cells(c, task_id);
  std::set<std::string> columns;
  std::map<std::string, int> count;
  for (const auto& cell : cells) columns.insert(cell.column), ++count[cell.column];
  if (columns.empty()) return q;
  // the reference: the most models measured; ties to the first in name order (deterministic)
  q.reference = *std::max_element(columns.begin(), columns.end(), [&](const std::string& a, const std::string& b) { return count[a] < count[b]; });
  std::map<std::string, QualityScale::Column> linked = {{q.reference, {q.reference, 1, 0, 0, true}}};
  while (link_next(cells, columns, linked)) {}
  // second tier: variants too rare to link alone, pooled per benchmark (only these: a cell is never counted twice)
  std::vector<Cell> all = cells;
  std::set<std::string> pooled_columns;
  for (const auto& cell : pool_unlinked(cells, linked)) all.push_back(cell), pooled_columns.insert(cell.column);
  while (link_next(all, pooled_columns, linked)) {}
  columns.insert(pooled_columns.begin(), pooled_columns.end());
  for (const auto& col : columns) q.columns.push_back(linked.count(col) ? linked[col] : QualityScale::Column{col, 1, 0, 0, false});
  const std::string ref_bench = q.reference.substr(0, q.reference.find(' '));
  for (const auto& b : c.benchmarks)
    if (b.id == ref_bench) q.scale_low = b.scale_low, q.scale_high = b.scale_high;
  std::vector<double> xs, ys;
  for (const auto& [model, value] : composite(all, linked)) {
    TaskQuality t;
    t.value = std::max(value, q.scale_low);
    double link_error = 0;
    for (const auto& cell : all)
      if (cell.model == model && linked.count(cell.column)) t.benchmarks.push_back(cell.column), link_error += linked[cell.column].error_at(cell.value);
    t.sd = link_error / static_cast<double>(t.benchmarks.size());  // the mean of its columns' linking errors (they are not independent)
    t.basis = "published: " + figure_list(cells, model);
    q.measured[model] = t;
    if (const ModelSpec* m = c.find_model(model)) xs.push_back(std::log(effective_params(*m) / 1e9)), ys.push_back(t.value);
  }
  std::tie(q.size_intercept, q.size_slope) = fit_line(xs, ys);
  q.size_sd = rms_residual(xs, ys, q.size_intercept, q.size_slope);
  q.family_sd = family_rule_error(q, c);
  return q;
}

// Figures are kept at or above the reference's floor (the score multiplies them) but not capped at its top: an
// equated figure above 100 orders models the reference cannot tell apart.
// Every figure is a mean and an uncertainty (§8 step 5); what ranks is the mean less one standard deviation, so a
// figure resting on less evidence needs a higher mean to rank as high.
namespace {
TaskQuality with_uncertainty(TaskQuality t, double mean, double sd, double floor) {
  t.mean = std::max(mean, floor);
  t.sd = sd;
  t.value = std::max(mean - sd, floor);
  t.basis += fmt::format("; ranks at {:.1f} ± {:.1f}, by {:.1f}", t.mean, t.sd, t.value);
  return t;
}
}  // namespace

// §8.3: the family's measured figures, each moved along the within-family size slope to this model's size, averaged
// and weighed against the size fit by how well each predicts a measured model; else the catalog-wide fit on size
// alone. Recency is not used: release dates are not in the catalog.
TaskQuality task_quality(const QualityScale& q, const Catalog& c, const ModelSpec& m) {
  const double by_size = q.size_intercept + q.size_slope * log_size(m);
  if (auto it = q.measured.find(m.id); it != q.measured.end()) {
    // Shrinkage towards what models of its size score (§8 step 4): the size fit counts as one more source, so a model
    // known from one document is half its figure and half its size's, one known from four is four fifths its own.
    // Sources, not columns: the figures of one model card share its harness, prompts and choice of what to report.
    TaskQuality t = it->second;
    const double n = static_cast<double>(std::max<size_t>(1, documents(q, c, m.id).size()));
    t.basis += fmt::format("; {:.1f} on the scale, shrunk towards the size fit's {:.1f} ({:g} source{} against 1)", it->second.value, by_size, n,
                           n == 1 ? "" : "s");
    // each source and the size fit alike uncertain (size_sd): the mean of n + 1 of them is uncertain by size_sd/√(n+1);
    // the linking error of its equated columns (it->second.sd) adds, in the share the figure keeps
    const double keep = n / (n + kSizeWeight);
    const double sd = std::hypot(q.size_sd / std::sqrt(n + kSizeWeight), keep * it->second.sd);
    return with_uncertainty(t, keep * t.value + (1 - keep) * by_size, sd, q.scale_low);
  }
  TaskQuality t;
  t.estimated = true;
  if (q.measured.empty()) {
    t.basis = "no published figure for the " + q.task + " task in data/quality/: all models score alike";
    return t;
  }
  std::string kin;
  if (const auto family = family_figure(q, c, m, within_family_slope(q, c), &kin)) {
    // two estimates of one figure, each weighed by the inverse of its squared error (inverse-variance weighting); as
    // uncertain as the better of them, not less: both miss the model's own departure from its family alike
    const double wf = 1 / std::max(q.family_sd * q.family_sd, 1e-9), ws = 1 / std::max(q.size_sd * q.size_sd, 1e-9);
    t.basis = fmt::format("estimated: no published {} figure; the {} family's ({}) scaled to {:.1f}B effective parameters, {:.1f} (misses a measured "
                          "figure by {:.1f}), weighed with the size fit's {:.1f} (misses by {:.1f})",
                          q.task, m.family, kin, effective_params(m) / 1e9, *family, q.family_sd, by_size, q.size_sd);
    return with_uncertainty(t, (wf * *family + ws * by_size) / (wf + ws), std::min(q.family_sd, q.size_sd), q.scale_low);
  }
  t.basis = fmt::format("estimated: no published {} figure and none for its family; the catalog-wide fit on size ({:.1f}B effective parameters)",
                        q.task, effective_params(m) / 1e9);
  return with_uncertainty(t, by_size, q.size_sd, q.scale_low);
}

}  // namespace kvplan

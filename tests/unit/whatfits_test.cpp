// data/quality/ loading, the task quality scale (docs/ranking.md §8), what fits (§9) and needs (§10).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"

using namespace kvplan;
namespace fs = std::filesystem;

namespace {

// Two coding benchmarks on different scales: "bench-b" = 2 · "bench-a" − 10 on the three models that have both.
const char* kBenchmarks =
    "benchmarks:\n"
    "  - {id: bench-a, name: A, tasks: [coding], metric: '%', scale: [0, 100], higher_is_better: true, source: test}\n"
    "  - {id: bench-b, name: B, tasks: [coding], metric: '%', scale: [0, 200], higher_is_better: true, source: test}\n"
    "  - {id: bench-err, name: E, tasks: [coding], metric: 'error %', scale: [0, 100], higher_is_better: false, source: test}\n";

std::string score(const std::string& model, const std::string& bench, double v, const std::string& extra = "") {
  return "  - {model: " + model + ", benchmark: " + bench + ", value: " + std::to_string(v) + ", source: test, date: 2025-01" + extra + "}\n";
}

// A data directory with the given quality file (the embedded catalog plus it).
Catalog with_quality(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("kvplan_whatfits_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir / "quality");
  std::ofstream(dir / "quality" / "fixture.yaml") << text;
  Catalog c = load_catalog({dir.string()});
  // the embedded data/quality/ scores would mix with the fixture's: keep the fixture's benchmarks alone
  std::erase_if(c.scores, [](const BenchmarkScore& x) { return x.benchmark.rfind("bench-", 0) != 0; });
  return c;
}

Catalog fixture() {
  std::string s = kBenchmarks;
  s += "scores:\n";
  for (auto [m, a] : std::vector<std::pair<const char*, double>>{{"qwen2.5-coder-7b-instruct", 40}, {"qwen2.5-coder-14b-instruct", 50}, {"qwen2.5-coder-32b-instruct", 60}})
    s += score(m, "bench-a", a) + score(m, "bench-b", 2 * a - 10);
  s += score("qwen3-8b", "bench-b", 110);                 // B only: 110 → (110 + 10) / 2 = 60 on A's scale
  s += score("qwen3-8b", "bench-a", 95, ", mode: thinking");  // another condition: a column of its own, one model, not linked
  return with_quality("fixture", s);
}

void expect_error(const std::string& name, const std::string& scores, const std::string& in_message) {
  try {
    with_quality(name, std::string(kBenchmarks) + "scores:\n" + scores);
    FAIL("no error for " << name);
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(in_message) != std::string::npos);
    CHECK(e.field().find("fixture.yaml:") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("quality data: unknown model, unknown benchmark, out of scale and duplicates are input errors naming the file") {
  expect_error("unknown_model", score("qwen2.5-coder-33b", "bench-a", 50), "names no catalog model");
  expect_error("unknown_bench", score("qwen2.5-coder-32b-instruct", "bench-c", 50), "unknown benchmark");
  expect_error("out_of_scale", score("qwen2.5-coder-32b-instruct", "bench-a", 101), "outside the benchmark's scale");
  expect_error("duplicate", score("qwen2.5-coder-32b-instruct", "bench-a", 50) + score("qwen2.5-coder-32b-instruct", "bench-a", 51), "duplicate quality score");
  expect_error("bad_mode", score("qwen2.5-coder-32b-instruct", "bench-a", 50, ", mode: fast"), "mode must be");
  try {
    with_quality("dup_bench", std::string(kBenchmarks) + "  - {id: bench-a, tasks: [coding], metric: x, scale: [0, 1], source: s}\n");
    FAIL("a benchmark defined twice");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("defined twice") != std::string::npos);
  }
  try {
    with_quality("bad_task", "benchmarks:\n  - {id: x, tasks: [codin], metric: x, scale: [0, 1], source: s}\n");
    FAIL("an unknown task");
  } catch (const InputError& e) {
    CHECK(e.suggestion() == "coding");
  }
  // a score's model suggests the nearest id
  try {
    with_quality("suggest", std::string(kBenchmarks) + "scores:\n" + score("qwen2.5-coder-32b-instrct", "bench-a", 50));
    FAIL("a misspelt model id");
  } catch (const InputError& e) {
    CHECK(e.suggestion() == "qwen2.5-coder-32b-instruct");
  }
}

TEST_CASE("linear equating puts each benchmark on the reference's scale (hand-computed)") {
  const Catalog c = fixture();
  const QualityScale q = quality_scale(c, "coding");
  // bench-b has the most models (4), and is the reference
  CHECK(q.reference == "bench-b");
  const auto& thinking = *std::find_if(q.columns.begin(), q.columns.end(), [](const auto& col) { return col.id == "bench-a (thinking)"; });
  CHECK_FALSE(thinking.linked);  // one model in common: too few to equate
  const auto& b = *std::find_if(q.columns.begin(), q.columns.end(), [](const auto& col) { return col.id == "bench-a"; });
  REQUIRE(b.linked);
  // bench-a onto bench-b over qwen2.5-coder 7b/14b/32b (A 40/50/60, B 70/90/110): B = 2A − 10 exactly
  CHECK(b.slope == Approx(2));
  CHECK(b.shift == Approx(-10));
  CHECK(q.measured.at("qwen2.5-coder-32b-instruct").value == Approx(110).epsilon(1e-9));
  CHECK(q.measured.at("qwen3-8b").value == Approx(110));  // its bench-b figure alone
  CHECK_FALSE(q.measured.at("qwen2.5-coder-32b-instruct").estimated);
}

TEST_CASE("linear equating with scatter: the means and deviations over the common models (hand-computed)") {
  std::string s = std::string(kBenchmarks) + "scores:\n";
  const std::vector<double> xa = {40, 50, 60, 30}, xb = {70, 100, 110, 80};
  const char* models[] = {"qwen2.5-coder-7b-instruct", "qwen2.5-coder-14b-instruct", "qwen2.5-coder-32b-instruct", "qwen3-8b"};
  for (int i = 0; i < 4; ++i) s += score(models[i], "bench-a", xa[i]) + score(models[i], "bench-b", xb[i]);
  s += score("qwen3-14b", "bench-b", 150);
  const Catalog c = with_quality("scatter", s);
  const QualityScale q = quality_scale(c, "coding");
  REQUIRE(q.reference == "bench-b");
  const auto& b = *std::find_if(q.columns.begin(), q.columns.end(), [](const auto& col) { return col.id == "bench-a"; });
  auto mean = [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s / v.size(); };
  auto sd = [&](const std::vector<double>& v) { double m = mean(v), s = 0; for (double x : v) s += (x - m) * (x - m); return std::sqrt(s / v.size()); };
  CHECK(b.slope == Approx(sd(xb) / sd(xa)));
  CHECK(b.shift == Approx(mean(xb) - b.slope * mean(xa)));
  const double q32 = (110 + b.shift + b.slope * 60) / 2;
  CHECK(q.measured.at("qwen2.5-coder-32b-instruct").value == Approx(q32));
  // the link's error: root mean square of B − (shift + slope·A) over the 4 common models, growing with the distance
  // of a figure from their mean (the prediction error of a fitted line)
  double ss = 0;
  for (int i = 0; i < 4; ++i) ss += std::pow(xb[i] - b.shift - b.slope * xa[i], 2);
  const double residual = std::sqrt(ss / 4);
  CHECK(b.residual == Approx(residual));
  CHECK(b.error_at(mean(xa)) == Approx(residual / 2));
  const double z = (60 - mean(xa)) / sd(xa);
  CHECK(b.error_at(60) == Approx(residual * std::sqrt((1 + z * z) / 4)));
  CHECK(b.error_at(90) > b.error_at(60));
  // qwen2.5-coder-32b: its bench-b figure (the reference, no linking error) and its equated bench-a figure, averaged
  CHECK(q.measured.at("qwen2.5-coder-32b-instruct").sd == Approx(b.error_at(60) / 2));
}

TEST_CASE("a measured figure is shrunk towards the size fit, one source against its own sources") {
  // qwen2.5-coder-32b: bench-a and bench-b from one document (n = 1); qwen3-14b: the same two from two documents (n = 2)
  std::string s = std::string(kBenchmarks) + "scores:\n";
  for (auto [m, a] : std::vector<std::pair<const char*, double>>{{"qwen2.5-coder-7b-instruct", 40}, {"qwen2.5-coder-14b-instruct", 50}, {"qwen2.5-coder-32b-instruct", 60}})
    s += score(m, "bench-a", a) + score(m, "bench-b", 2 * a - 10);
  s += "  - {model: qwen3-14b, benchmark: bench-a, value: 70, source: 'card, https://example.org/card', date: 2025-01}\n"
       "  - {model: qwen3-14b, benchmark: bench-b, value: 130, source: 'https://example.org/leaderboard.csv, row x', date: 2025-01}\n";
  const Catalog c = with_quality("shrink", s);
  const QualityScale q = quality_scale(c, "coding");
  for (auto [id, n] : std::vector<std::pair<const char*, double>>{{"qwen2.5-coder-32b-instruct", 1}, {"qwen3-14b", 2}}) {
    const ModelSpec& m = c.model(id);
    const TaskQuality& own = q.measured.at(id);
    const double by_size = q.size_intercept + q.size_slope * std::log(effective_params(m) / 1e9);
    INFO(id);
    CHECK(own.benchmarks.size() == 2);
    const TaskQuality t = task_quality(q, c, m);
    CHECK(t.mean == Approx(std::max((n * own.value + by_size) / (n + 1), q.scale_low)));
    // uncertain by size_sd/√(n+1), plus the linking error in the share the figure keeps; what ranks is mean − sd
    CHECK(t.sd == Approx(std::hypot(q.size_sd / std::sqrt(n + 1), n / (n + 1) * own.sd)));
    CHECK(t.value == Approx(std::max(t.mean - t.sd, q.scale_low)));
    CHECK(t.basis.find(n == 1 ? "(1 source against 1)" : "(2 sources against 1)") != std::string::npos);
    CHECK_FALSE(t.estimated);
  }
}

TEST_CASE("variants of a benchmark that are different tests are not pooled; others are") {
  std::string s = std::string(kBenchmarks) +
                  "  - {id: bench-w, name: W, tasks: [coding], metric: '%', scale: [0, 100], higher_is_better: true, pool_variants: false, source: test}\n"
                  "  - {id: bench-p, name: P, tasks: [coding], metric: '%', scale: [0, 100], source: test}\n"
                  "scores:\n";
  const char* models[] = {"qwen2.5-coder-7b-instruct", "qwen2.5-coder-14b-instruct", "qwen2.5-coder-32b-instruct"};
  for (int i = 0; i < 3; ++i) {
    const std::string window = ", variant: w" + std::to_string(i);  // one variant per model: too rare to link alone
    s += score(models[i], "bench-a", 40 + 10 * i) + score(models[i], "bench-w", 10 + 10 * i, window) + score(models[i], "bench-p", 10 + 10 * i, window);
  }
  const QualityScale q = quality_scale(with_quality("pooling", s), "coding");
  for (const char* m : models) {
    const auto& cols = q.measured.at(m).benchmarks;
    INFO(m);
    CHECK(std::count(cols.begin(), cols.end(), "bench-p (variants pooled)") == 1);
    CHECK(std::none_of(cols.begin(), cols.end(), [](const std::string& c) { return c.rfind("bench-w", 0) == 0; }));
  }
}

TEST_CASE("a lower-is-better benchmark is mirrored on its scale") {
  std::string s = std::string(kBenchmarks) + "scores:\n" + score("qwen2.5-coder-7b-instruct", "bench-err", 70);
  const Catalog c = with_quality("mirror", s);
  CHECK(quality_scale(c, "coding").measured.at("qwen2.5-coder-7b-instruct").value == Approx(30));
}

TEST_CASE("a model without a figure is estimated from its family, scaled by size, and says so") {
  const Catalog c = fixture();
  const QualityScale q = quality_scale(c, "coding");
  const ModelSpec& m = c.model("qwen2.5-3b-instruct");
  const TaskQuality t = task_quality(q, c, m);
  CHECK(t.estimated);
  CHECK(t.basis.find("qwen2.5") != std::string::npos);
  CHECK(q.size_slope >= 0);
  // the family mean of each member moved along the within-family slope to this size
  double sum = 0;
  int n = 0;
  // the within-family slope by hand: the fixture's measured models of one family are the three coders (qwen3-8b is
  // alone in its family), so it is their least-squares slope
  std::vector<std::pair<double, double>> kin;
  for (const auto& [id, f] : q.measured)
    if (c.model(id).family == m.family) kin.emplace_back(std::log(effective_params(c.model(id)) / 1e9), f.value);
  REQUIRE(kin.size() == 3);
  double mx = 0, my = 0, sxy = 0, sxx = 0;
  for (auto [x, y] : kin) mx += x / 3, my += y / 3;
  for (auto [x, y] : kin) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
  const double slope = std::max(0.0, sxy / sxx);
  for (auto [x, y] : kin) sum += y + slope * (std::log(effective_params(m) / 1e9) - x), ++n;
  REQUIRE(n > 0);
  // the family's figure and the size fit's, each weighed by the inverse square of how far its rule misses measured
  // figures (family: each measured model left out in turn), and as uncertain as the better of the two
  const double wf = 1 / (q.family_sd * q.family_sd), ws = 1 / (q.size_sd * q.size_sd);
  const double by_size = q.size_intercept + q.size_slope * std::log(effective_params(m) / 1e9);
  CHECK(t.mean == Approx(std::max((wf * sum / n + ws * by_size) / (wf + ws), q.scale_low)));
  CHECK(t.sd == Approx(std::min(q.family_sd, q.size_sd)));
  CHECK(t.value == Approx(std::max(t.mean - t.sd, q.scale_low)));
  // smaller than every measured member of the family, so not above the smallest of them
  CHECK(t.value <= q.measured.at("qwen2.5-coder-7b-instruct").value + 1e-9);
}

TEST_CASE("every catalog model's figure for every task ranks by its mean less an uncertainty of its own") {
  const Catalog& c = kvtest::catalog();
  for (const auto& task : c.tasks) {
    const QualityScale q = quality_scale(c, task.id);
    if (q.measured.empty()) continue;
    REQUIRE(q.size_sd > 0);
    for (const auto& m : c.models) {
      const TaskQuality t = task_quality(q, c, m);
      INFO(task.id << " " << m.id);
      CHECK(t.sd > 0);  // no figure is certain
      CHECK(t.value == Approx(std::max(t.mean - t.sd, q.scale_low)));
      // an estimate is no more certain than the better of the rules it rests on, measured on the catalog's figures
      if (t.estimated) CHECK(t.sd >= std::min(q.family_sd, q.size_sd) - 1e-9);
      // a measured figure is at least as uncertain as its documents and the size fit leave it (at most 20 documents)
      else CHECK(t.sd >= q.size_sd / std::sqrt(21.0));
    }
  }
}

TEST_CASE("what fits: every row fits, the order follows the rule, no row is dominated by one below it, filters hold") {
  const Catalog& c = kvtest::catalog();
  for (auto [gpu, task] : std::vector<std::pair<const char*, const char*>>{{"rtx4090", "agentic"}, {"rtx3060-12gb", "chat"}}) {
    WhatFitsRequest q;
    q.base.gpu = gpu;
    q.base.task = task;
    q.base.host_ram = 64LL << 30;
    q.top = 1000;
    const WhatFits w = what_fits(c, q);
    INFO(gpu << " " << task);
    REQUIRE(w.rows.size() >= 10);
    CHECK(w.fitting + w.not_fitting == w.considered);
    for (size_t i = 0; i < w.rows.size(); ++i) {
      const FitRow& a = w.rows[i];
      INFO(a.model);
      CHECK(a.option.fits());
      CHECK(a.score == Approx(a.quality.value * a.plan_factor));
      if (i + 1 < w.rows.size()) CHECK_FALSE(fit_ranks_before(w.rows[i + 1], a));
      for (size_t j = i + 1; j < w.rows.size(); ++j) {  // b below a never dominates a
        const FitRow& b = w.rows[j];
        const int T = a.target_ctx;
        const bool ge = b.quality.value >= a.quality.value && std::min(b.option.ctx_per_slot, T) >= std::min(a.option.ctx_per_slot, T) &&
                        b.option.decode_tps >= a.option.decode_tps && b.option.quality.expected_loss <= a.option.quality.expected_loss &&
                        b.option.quality.high <= a.option.quality.high && b.option.ttft_s <= a.option.ttft_s;
        const bool gt = b.quality.value > a.quality.value || std::min(b.option.ctx_per_slot, T) > std::min(a.option.ctx_per_slot, T) ||
                        b.option.decode_tps > a.option.decode_tps || b.option.quality.expected_loss < a.option.quality.expected_loss;
        INFO("below: " << b.model);
        CHECK_FALSE((ge && gt && b.score > a.score));
      }
    }
    // filters
    WhatFitsRequest f = q;
    f.min_ctx = 32768;
    f.min_tps = 20;
    f.arch_kind = "moe";
    for (const auto& r : what_fits(c, f).rows) {
      CHECK(r.option.ctx_per_slot >= 32768);
      CHECK(r.option.decode_tps >= 20);
      CHECK(r.moe);
    }
    f = q;
    f.family = "qwen3";
    f.top = 3;
    const WhatFits fam = what_fits(c, f);
    CHECK(fam.rows.size() <= 3);
    for (const auto& r : fam.rows) CHECK(r.family == "qwen3");
    f = q;
    f.licenses = {"open"};
    const WhatFits open = what_fits(c, f);
    CHECK_FALSE(open.rows.empty());
    for (const auto& r : open.rows) CHECK(c.find_license(r.license)->osi);
    f.licenses = {"gemma", "llama3.1"};
    for (const auto& r : what_fits(c, f).rows) CHECK((r.license == "gemma" || r.license == "llama3.1"));
    f.licenses = {"other"};
    for (const auto& r : what_fits(c, f).rows) CHECK(c.find_license(r.license)->hub == "other");
  }
}

TEST_CASE("licenses: every catalog model has a license the filter accepts, with its source") {
  const Catalog& c = kvtest::catalog();
  REQUIRE_FALSE(c.licenses.empty());
  for (const auto& m : c.models) {
    INFO(m.id);
    const LicenseSpec* l = c.find_license(m.license);
    REQUIRE(l != nullptr);
    CHECK_FALSE(m.license_source.empty());
    CHECK_NOTHROW(check_license_filter(c, {m.license}));
    CHECK(license_matches(c, m.license, {m.license}));
    CHECK(license_matches(c, m.license, {}));
    CHECK(license_matches(c, m.license, {"open"}) == l->osi);
  }
  for (const auto& l : c.licenses) CHECK_FALSE(l.source.empty());
  // a model read from a file has no known license: any license filter leaves it out
  CHECK_FALSE(license_matches(c, "", {"open"}));
}

TEST_CASE("licenses: a bad --license value is refused naming the field, the value, what is accepted and the closest") {
  WhatFitsRequest q;
  q.base.gpu = "rtx4090";
  q.licenses = {"apache2"};
  try {
    what_fits(kvtest::catalog(), q);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.field() == "--license");
    CHECK(std::string(e.what()).find("apache2") != std::string::npos);
    CHECK(std::string(e.what()).find("apache-2.0") != std::string::npos);
  }
  const fs::path dir = fs::temp_directory_path() / "kvplan_license_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "m.yaml") << "models:\n  - {id: qwen3-8b, license: apache}\n";
  try {
    load_catalog({dir.string()});
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.field() == "models.qwen3-8b.license");
    CHECK(std::string(e.what()).find("apache-2.0") != std::string::npos);
  }
}

TEST_CASE("what fits: bad filters are input errors") {
  WhatFitsRequest q;
  q.base.gpu = "rtx4090";
  q.arch_kind = "mixture";
  CHECK_THROWS_AS(what_fits(kvtest::catalog(), q), InputError);
  q.arch_kind = "";
  q.family = "qwen9";
  CHECK_THROWS_AS(what_fits(kvtest::catalog(), q), InputError);
  q.family = "";
  q.models = {"qwen3-9b-nonexistent"};
  CHECK_THROWS_AS(what_fits(kvtest::catalog(), q), InputError);
}

TEST_CASE("needs: the answer meets the requirement, and less memory does not") {
  const Catalog& c = kvtest::catalog();
  Request r;
  r.model = "qwen2.5-coder-32b-instruct";
  r.task = "agentic";
  const NeedsResult n = needs(c, r, 2);
  REQUIRE(n.smallest_memory);
  REQUIRE(n.smallest_gpu);
  CHECK(n.target_ctx == 32768);
  for (const NeedsDevice* d : {&*n.smallest_memory, &*n.smallest_gpu}) {
    CHECK(d->option.ctx_per_slot >= n.target_ctx);
    CHECK((d->option.cache_type_k == "f16" || d->option.cache_type_k == "q8_0"));
    CHECK(d->option.fits());
  }
  CHECK(n.smallest_gpu->option.decode_tps >= n.floor_tps);
  CHECK(n.smallest_memory->option.quality.risk != Risk::avoid);
  // 64 MiB less: no option reaches the target with 8-bit K on the device alone, short of a weights format whose loss
  // is "avoid" (docs/ranking.md §10: a plan to avoid does not meet the task)
  Request less = r;
  less.gpu = std::to_string(n.smallest_memory->memory / (1 << 20) - 64) + "MiB";
  less.top = 1000;
  for (const auto& o : plan(c, less).options)
    CHECK_FALSE((o.fits() && o.ctx_per_slot >= n.target_ctx && (o.cache_type_k == "f16" || o.cache_type_k == "q8_0") && !o.n_gpu_layers &&
                 !o.n_cpu_moe && o.quality.risk != Risk::avoid));
}

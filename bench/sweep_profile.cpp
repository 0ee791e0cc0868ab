// Where the bench sweep's time goes, plan by plan: BM_PlanSweep's requests (sweep.hpp), each plan timed
// (CPU time of this thread, best of --repeat runs), then the distribution (mean, median, p90, max) and the slowest
// plans. Not a timed test: docs/benchmarks.md reports its figures.
// Build: cmake --build build --target kvplan_sweep_profile; run: build/bench/kvplan_sweep_profile [--repeat N] [--top N]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvplan/kvplan.hpp"
#include "sweep.hpp"

namespace {

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

struct Timed {
  std::string gpu, model;
  double ms = 0;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3, top = 15;
  for (int i = 1; i < argc; i += 2) {
    const bool is_repeat = std::strcmp(argv[i], "--repeat") == 0, known = is_repeat || std::strcmp(argv[i], "--top") == 0;
    char* end = nullptr;
    const long n = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : -1;
    if (!known || end == nullptr || *end != '\0' || n < (is_repeat ? 1 : 0) || n > 1000) {
      std::fprintf(stderr, "usage: %s [--repeat N (1..1000)] [--top N (0..1000)]: bad '%s'\n", argv[0], argv[i]);
      return 2;
    }
    (is_repeat ? repeat : top) = static_cast<int>(n);
  }
  const auto& catalog = kvplan::builtin_catalog();
  std::vector<Timed> plans;
  kvplan_bench::for_each_sweep_request(catalog, [&](const kvplan::Request& req) {
    double best = 1e300;
    for (int r = 0; r < repeat; ++r) {
      const double t0 = thread_cpu_ms();
      const kvplan::Plan p = kvplan::plan(catalog, req);
      best = std::min(best, thread_cpu_ms() - t0);
      if (p.options.size() > 1000000) std::puts("");  // keep the plan observable
    }
    plans.push_back({req.gpu, req.model, best});
  });
  if (plans.empty()) return 1;
  std::vector<double> ms;
  double total = 0;
  for (const auto& t : plans) {
    ms.push_back(t.ms);
    total += t.ms;
  }
  std::printf("plans %zu  total %.1f ms  mean %.3f ms  median %.3f ms  p90 %.3f ms  max %.3f ms\n", plans.size(), total,
              total / static_cast<double>(plans.size()), percentile(ms, 0.5), percentile(ms, 0.9), percentile(ms, 1.0));
  std::sort(plans.begin(), plans.end(), [](const Timed& a, const Timed& b) { return a.ms > b.ms; });
  double shown = 0;
  for (int i = 0; i < top && i < static_cast<int>(plans.size()); ++i) {
    const auto& t = plans[static_cast<std::size_t>(i)];
    shown += t.ms;
    std::printf("%8.3f ms  %-14s %s\n", t.ms, t.gpu.c_str(), t.model.c_str());
  }
  std::printf("the %d slowest: %.1f ms, %.0f %% of the total\n", std::min(top, static_cast<int>(plans.size())), shown,
              100 * shown / total);
  return 0;
}

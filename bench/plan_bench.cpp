// Google Benchmark programs for the planner library: plan() on the mission request (CUDA and CPU backends), a models x
// GPUs sweep, the CPU backend's reserve-graph path, a fully pinned request, loading the built-in catalog (the image)
// beside parsing its YAML (the --data path), and to_json().
// Build: cmake --build build --target kvplan_bench; run: build/bench/kvplan_bench.
// See docs/benchmarks.md for the figures and how to read them.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvplan/kvplan.hpp"
#include "sweep.hpp"

namespace {

kvplan::Request mission_request() {
  kvplan::Request req;
  req.gpu = "24GB";
  req.model = "qwen2.5-coder-32b";
  req.task = "agentic";
  return req;
}

// Peak resident set size of this process so far, in MiB (Linux reports ru_maxrss in KiB).
double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// With --benchmark_repetitions=N, also report the fastest repetition: on a shared machine the
// minimum is the figure least disturbed by other load.
double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

// plan() on one request, once per iteration.
void time_plan(benchmark::State& state, const kvplan::Request& req) {
  const auto& catalog = kvplan::builtin_catalog();
  for (auto _ : state) {
    kvplan::Plan p = kvplan::plan(catalog, req);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations());
}

// (a) The mission request: the ranker over weights x cache types x flash attention, with the
// largest fitting context found per candidate.
void BM_PlanMission(benchmark::State& state) { time_plan(state, mission_request()); }
BENCHMARK(BM_PlanMission)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);

// (b) Every catalog model on a spread of GPUs (bench/sweep.hpp). One iteration plans every pair; items/s is plans
// per second.
std::vector<kvplan::Request> sweep_requests() {
  std::vector<kvplan::Request> out;
  kvplan_bench::for_each_sweep_request(kvplan::builtin_catalog(), [&](const kvplan::Request& r) { out.push_back(r); });
  return out;
}

void BM_PlanSweep(benchmark::State& state) {
  const auto& catalog = kvplan::builtin_catalog();
  const std::vector<kvplan::Request> requests = sweep_requests();
  for (auto _ : state) {
    for (const auto& req : requests) {
      kvplan::Plan p = kvplan::plan(catalog, req);
      benchmark::DoNotOptimize(p);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(requests.size()));
  state.counters["plans_per_iter"] = static_cast<double>(requests.size());
  state.counters["models"] = static_cast<double>(catalog.models.size());
  state.counters["gpus"] = static_cast<double>(kvplan_bench::kSweepGpus.size());
}
BENCHMARK(BM_PlanSweep)  // ~1 s an iteration
    ->Unit(benchmark::kMillisecond)
    ->ComputeStatistics("min", min_of)
    ->MinTime(2.0);

// (a') The mission request on the CPU backend: every compute figure is the reserve graph built and placed.
void BM_PlanMissionCpu(benchmark::State& state) {
  kvplan::Request req = mission_request();
  req.backend = "cpu";
  time_plan(state, req);
}
BENCHMARK(BM_PlanMissionCpu)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);

// (c) Everything pinned: weights, context, both cache types and flash attention -> one option.
// (c') The ranker on the CPU backend, where every candidate's compute buffer comes from building the reserve graph
// and placing it as ggml-alloc does (48 layers, MoE: Qwen3-30B-A3B in 64 GB of RAM).
void BM_PlanCpuBackend(benchmark::State& state) {
  kvplan::Request req = mission_request();
  req.gpu = "64GB";
  req.backend = "cpu";
  req.model = "qwen3-30b-a3b";
  time_plan(state, req);
}
BENCHMARK(BM_PlanCpuBackend)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);

void BM_PlanPinned(benchmark::State& state) {
  kvplan::Request req = mission_request();
  req.weights = "Q4_K_M";
  req.ctx_size = 32768;
  req.cache_type_k = "q8_0";
  req.cache_type_v = "q8_0";
  req.flash_attn = "on";
  time_plan(state, req);
}
BENCHMARK(BM_PlanPinned)->Unit(benchmark::kMicrosecond)->ComputeStatistics("min", min_of);

// (d) The built-in catalog as every run loads it: decoded from the image the build made of data/ (no YAML).
void BM_LoadBuiltinCatalog(benchmark::State& state) {
  for (auto _ : state) {
    kvplan::Catalog c = kvplan::load_catalog();
    benchmark::DoNotOptimize(c);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LoadBuiltinCatalog)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);

// (d') The YAML path that --data DIR takes: the embedded files parsed and validated, merged with an (empty) overlay.
void BM_ParseCatalogYaml(benchmark::State& state) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvplan_bench_empty_overlay";
  std::filesystem::create_directories(dir);
  for (auto _ : state) {
    kvplan::Catalog c = kvplan::load_catalog({dir.string()});
    benchmark::DoNotOptimize(c);
  }
  std::filesystem::remove_all(dir);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseCatalogYaml)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);

// (e) Serialising the mission plan to the JSON contract (indent 2, as `--json` prints).
void BM_ToJson(benchmark::State& state) {
  const kvplan::Plan p = kvplan::plan(kvplan::builtin_catalog(), mission_request());
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string json = kvplan::to_json(p);
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["json_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ToJson)->Unit(benchmark::kMicrosecond)->ComputeStatistics("min", min_of);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Reported once, after everything ran: the high-water mark of the whole process.
  std::printf("peak RSS (getrusage ru_maxrss): %.1f MiB\n", peak_rss_mib());
  return 0;
}

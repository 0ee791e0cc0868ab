// The bench sweep's requests, shared by BM_PlanSweep (plan_bench.cpp) and kvplan_sweep_profile (sweep_profile.cpp):
// every catalog model on a spread of GPUs (CUDA consumer/datacenter, ROCm, Apple unified, a bare size).
#pragma once
#include <string>
#include <vector>

#include "kvplan/kvplan.hpp"

namespace kvplan_bench {

inline const std::vector<std::string> kSweepGpus = {"rtx3060-12gb", "rtx4090", "a100-80gb-sxm4", "rx7900xtx", "m4max-128gb", "24GB"};

// Calls f(request) for every (GPU, model) pair the planner accepts, GPU by GPU.
template <class F>
void for_each_sweep_request(const kvplan::Catalog& catalog, F&& f) {
  for (const auto& gpu : kSweepGpus) {
    for (const auto& model : catalog.models) {
      kvplan::Request req;
      req.gpu = gpu;
      req.model = model.id;
      req.task = "general";
      try {
        (void)kvplan::plan(catalog, req);  // keep only requests the planner accepts
      } catch (const kvplan::InputError&) {
        continue;
      }
      f(req);
    }
  }
}

}  // namespace kvplan_bench

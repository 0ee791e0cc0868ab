// Reading data/quality/ (benchmarks and published scores; format in data/quality/README.md).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "kvplan/catalog.hpp"

namespace kvplan::detail {

using QualityEntries = std::vector<std::pair<YAML::Node, std::string>>;  // (entry, file it came from)

// Each benchmark once; its tasks must be catalog tasks and its scale a non-empty range.
std::vector<Benchmark> read_benchmarks(const QualityEntries& entries, const Catalog& c);
// Each score names a catalog model and a defined benchmark, lies within that benchmark's scale, and is the
// only row of its (model, benchmark, variant, mode).
std::vector<BenchmarkScore> read_scores(const QualityEntries& entries, const Catalog& c);

}  // namespace kvplan::detail

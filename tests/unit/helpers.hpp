// Shared fixtures for the unit tests: the built-in catalog and its llama.cpp engine.
#pragma once
#include "kvplan/kvplan.hpp"

namespace kvtest {
inline const kvplan::Catalog& catalog() { return kvplan::builtin_catalog(); }
inline const kvplan::EngineSpec& engine() { return catalog().engine("llama.cpp"); }
inline const kvplan::BackendSpec& cuda() { return engine().backend("cuda"); }
inline const kvplan::GgmlType& type(const char* name) { return engine().type(name, "test"); }
inline constexpr double kMiBd = 1024.0 * 1024.0;
inline double mib(kvplan::Bytes b) { return static_cast<double>(b) / kMiBd; }
}  // namespace kvtest

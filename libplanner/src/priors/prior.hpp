// The quality prior: expected loss of one (weights, context, K, V) option for a model and task.
#pragma once
#include <string>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan::priors {

struct QualityInput {
  const ModelSpec* model = nullptr;
  const WeightFormat* weights = nullptr;
  double weights_bpw = 16;   // bits per weight of this model in this format
  std::string type_k, type_v;
  int ctx = 0;
  bool rotation = false;     // the engine rotates quantized K/V for this model
  const TaskProfile* task = nullptr;
};

Quality assess(const PriorParams& prior, const QualityInput& in);
Risk risk_band(const PriorParams& prior, double loss);

// Pieces of the model, exposed for tests and docs.
double size_factor(const PriorParams& prior, double params_b);
double alpha_k(const PriorParams& prior, double params_b);
double kv_loss(const PriorParams& prior, const QualityInput& in);

}  // namespace kvplan::priors

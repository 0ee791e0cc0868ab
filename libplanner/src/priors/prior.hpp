// The quality prior: expected loss of one (weights, context, K, V) option for a model and task.
// The formula is docs/priors.md §1; tools/fit_priors.py implements the same one and fits its parameters.
#pragma once
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan::priors {

struct QualityInput {
  const ModelSpec* model = nullptr;
  const WeightFormat* weights = nullptr;
  double weights_bpw = 16;   // bits per weight of this model in this format
  std::string type_k, type_v;
  // prior.type(type_k) and prior.type(type_v) when the caller has them (nullptr: looked up by name)
  const TypeSensitivity* k_sensitivity = nullptr;
  const TypeSensitivity* v_sensitivity = nullptr;
  int ctx = 0;
  bool rotation = false;     // the engine rotates quantized K/V for this model (build rule kv_rotation)
  double kv_loss = -1;       // kv_loss(prior, *this) when the caller has it (< 0: worked out here)
  const TaskProfile* task = nullptr;
};

// The cache loss split into its K and V terms (family, size and context factors applied; no task, no W).
struct KvParts {
  double k = 0, v = 0;
  double total() const { return k + v; }
};

// Where no fitted row measures an option's cell: the range its nearest measured analogs bound it to (docs/priors.md
// §1.3): the range of the analogs' measured / predicted ratios. extrapolated = false: measured, the prior's own
// estimate stands.
struct EvidenceBounds {
  bool extrapolated = false;
  double lo = 0, hi = 0;             // ratios; meaningful when analogs is not empty
  std::vector<const AnalogRow*> analogs;  // the prior's rows (their ids name measurements.csv rows)
};
EvidenceBounds evidence_bounds(const PriorParams& prior, const QualityInput& in, bool rot_k);
// The index evidence_bounds reads (PriorParams::AnalogIndex), from rows whose types and families are indexed.
PriorParams::AnalogIndex index_analogs(const PriorParams& prior);

// Whether K's rotation changes its loss: the unrotated term vanishes at 8 bits (docs/priors.md §1.2), so only K
// types of at most 6 equivalent bits are told apart by rotation when measurements are matched to an option.
inline bool rotation_matters(const TypeSensitivity& k) { return k.quantized() && k.k_bits <= 6; }

// What the measurements say of one (K, V, rotation) cell of a model: its evidence bounds (none under a user
// calibration) and the closest measurement row. Neither depends on the context or the weights, so plan() works it
// out once per cell instead of once per candidate and passes it to assess().
struct CellEvidence {
  EvidenceBounds bounds;
  const MeasuredEvidence* nearest = nullptr;
  bool nearest_known = true;  // false: not looked for; assess() finds it when it writes the sentences
};
// with_nearest false: the closest measurement is left to assess() (only the printed options cite it)
CellEvidence cell_evidence(const PriorParams& prior, const QualityInput& in, bool with_nearest = true);

// `cell`: cell_evidence(prior, in) when the caller has it (nullptr: worked out here).
// with_evidence false: the figures only (the ranker sizes ~200 candidates and prints five; their sentences and the
// ids of the analogs that bound them are written for the printed ones).
Quality assess(const PriorParams& prior, const QualityInput& in, const CellEvidence* cell = nullptr, bool with_evidence = true);
Risk risk_band(const PriorParams& prior, double loss);

// Pieces of the model, exposed for tests, calibration and docs.
double size_factor(const PriorParams& prior, double params_b, double exponent);  // S(N)
double alpha_k(const PriorParams& prior, double params_b);                       // context exponent of low-bit K
double type_loss_k(const PriorParams& prior, const TypeSensitivity& t, bool rotated, double params_b);  // a_K (with S_R)
double type_loss_v(const PriorParams& prior, const TypeSensitivity& t);                                 // a_V
double weights_factor(const PriorParams& prior, double bpw);                                            // W
double attended_context(const ModelSpec& model, double ctx);  // the mean span the attention layers attend to
KvParts kv_parts(const PriorParams& prior, const QualityInput& in);  // without a user calibration
double kv_loss(const PriorParams& prior, const QualityInput& in);    // with the model's calibration, if any

}  // namespace kvplan::priors

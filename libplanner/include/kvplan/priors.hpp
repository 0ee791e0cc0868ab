// kvplan/priors.hpp — calibrating the quality prior to your own model and hardware.
//
// Measure your model with a few cache types (llama-perplexity, or tools/measure_kv), read the results with
// read_measurements(), and let calibrate() scale the prior's K and V terms for that model. The fitted global
// prior (data/priors/prior.yaml) stays the starting point: with few or noisy rows the factors stay near 1.
// docs/priors.md §7 describes the method.
#pragma once
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"

namespace kvplan {

// One measurement of a cache configuration against the f16 cache of the same model and weights.
struct Measurement {
  std::string k_type, v_type;   // cache types as kvplan names them (q8_0, q4_0, f16, fp8_e4m3, exl2_q4 ...)
  int ctx = 0;                  // tokens per sequence; 0 = not stated (llama-perplexity's default 512 is used)
  std::string metric = "ppl";   // "ppl": value is the relative PPL increase (0.012 = +1.2%); "kld": value is mean KLD
  double value = 0;
  double noise = 0;             // standard error of value, same unit; 0 = the default (docs/priors.md §3)
  int rotation = -1;            // 1 rotated, 0 not, -1 unknown (the reference build's rule for the model decides)
  double weights_bpw = 0;       // bits per weight of the weights used; 0 = unknown (W = 1)
  std::string weights;          // format as given (documentation)
  std::string origin;           // file:line, for messages and the explanation
};

// Reads a measurements file: either a CSV with a header row (the columns of data/priors/measurements.csv or of
// tools/measure_kv output: k_type, v_type, metric, ctx, rotation, value, baseline, rel_change, noise, weights), or
// the text output of one or more llama-perplexity runs (plain runs paired with the f16/f16 run at the same context,
// or --kl-divergence runs, whose "Mean PPL(Q)/PPL(base)" line is used). Rows whose K and V are both unquantized
// serve as baselines only. `catalog` (optional) resolves a weights column to bits per weight.
// Throws InputError naming file:line and the column for anything it cannot use.
std::vector<Measurement> read_measurements(const std::string& path, const Catalog* catalog = nullptr);
std::vector<Measurement> parse_measurements(const std::string& text, const std::string& origin, const Catalog* catalog = nullptr);

// The prior with a calibration for `model` (replacing an earlier one for it): K- and V-term factors fitted to the
// rows by least squares on log(measured + noise) - log(predicted + noise), shrunk toward 1 by the prior's own 80%
// interval, and an interval narrowed by the rows' residuals. Every cache type must be known to the prior.
// Throws InputError when no row measures a quantized cache.
PriorParams calibrate(const PriorParams& prior, const std::vector<Measurement>& rows, const ModelSpec& model);

}  // namespace kvplan

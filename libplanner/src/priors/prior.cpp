// The fitted prior of data/priors/prior.yaml (docs/priors.md §1; tools/fit_priors.py fits it with the same formula):
//   e_x   = eq_bits_x - bits_ref                (Gaussian-equivalent bits of the type in the K or V role)
//   a_K   = a_k exp(-beta_k e_K) [1 + r_norot exp(-beta_norot e_K) S_R(N)   if K is not rotated]
//   rotated: F_K,rot a_K,rot taken at most F_K,norot a_K,norot (rotation is never predicted to hurt)
//   a_V   = a_v exp(-beta_v e_V)                 (beta_k = beta_v = ln 4 in the shipped prior: fixed by the fit, not fitted)
//   S(N)  = min(max(knee/N, 1)^sigma, size_clamp_high)      (1 at and above the knee; sigma_K, sigma_V, sigma_R)
//   g     = (max(c, ctx_floor) / ctx_floor)^alpha, alpha_K = min(alpha_k (ref/N)^alpha_k_size, alpha_k_max) for low-bit K,
//           c = the attended context (sliding-window layers attend to at most their window)
//   L_kv  = F_all [F_K S_K a_K g_K + S_V a_V g_V]
//   L     = L_weights S_w(N) + T_task(ctx) W(bpw) L_kv
// The task factor scales the cache part only: the strictness evidence (tool calls, long reasoning) measures cache
// quantization, while weight-format losses are measured as plain perplexity.
#include "priors/prior.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kvplan::priors {
namespace {

double params_b(const ModelSpec& m) { return static_cast<double>(m.params) / 1e9; }

double g(const PriorParams& p, double ctx, double alpha) {
  // Growth only: no discount below the floor, so a type below low_bits never predicts less than one above it.
  return alpha == 0 ? 1.0 : std::pow(std::max(ctx, p.ctx_floor) / p.ctx_floor, alpha);
}

}  // namespace

// A sliding-window layer never attends to more than its window, so its quantized keys compete with at most that
// many others: the context that low-bit K damage grows with is the mean span the attention layers attend to,
// (full · ctx + sliding · min(ctx, window)) / (full + sliding). Recurrent layers have no keys.
double attended_context(const ModelSpec& m, double ctx) {
  if (!m.swa || m.swa->window <= 0) return ctx;
  int full = 0, sliding = 0;
  for (int il = 0; il < m.layers; ++il) {
    if (m.is_recurrent(il)) continue;
    ++(m.is_sliding(il) ? sliding : full);
  }
  if (full + sliding == 0) return ctx;
  return (full * ctx + sliding * std::min(ctx, static_cast<double>(m.swa->window))) / (full + sliding);
}

namespace {


std::string pct(double x) {
  if (x < 0.001) return fmt::format("{:.2f}%", x * 100);
  if (x < 0.1) return fmt::format("{:.1f}%", x * 100);
  return fmt::format("{:.0f}%", x * 100);
}

// The measurement row closest to this option: same bit class for K and V, then exact types, rotation, family, size.
const MeasuredEvidence* nearest_measurement(const PriorParams& p, const QualityInput& in, bool rot_k) {
  const TypeSensitivity& k = p.type(in.type_k);
  const TypeSensitivity& v = p.type(in.type_v);
  if (!k.quantized() && !v.quantized()) return nullptr;
  const double n_b = params_b(*in.model);
  const MeasuredEvidence* best = nullptr;
  double best_score = -std::numeric_limits<double>::infinity();
  for (const auto& m : p.measured) {
    const TypeSensitivity* mk = p.type_at(m.k_index, m.k_type);
    const TypeSensitivity* mv = p.type_at(m.v_index, m.v_type);
    if (!mk || !mv || mk->quantized() != k.quantized() || mv->quantized() != v.quantized()) continue;
    if (k.quantized() && std::abs(mk->k_bits - k.k_bits) > 0.6) continue;
    if (v.quantized() && std::abs(mv->v_bits - v.v_bits) > 0.6) continue;
    double score = 0;
    if (m.k_type == in.type_k) score += 4;
    if (m.v_type == in.type_v) score += 3;
    // rotation matters for low-bit K only (docs/priors.md §1: the unrotated term vanishes at 8 bits)
    if (m.rotation == "any" || !rotation_matters(k) || (m.rotation == "yes") == rot_k) score += 2;
    if (m.family == in.model->family) score += 3;
    else if (p.family(m.family) || p.family(in.model->family)) score -= 2;  // a family with its own factor is no proxy
    if (m.kind == "ppl") score += 1.5;  // perplexity rows are in the prior's own unit
    if (m.source.find("secondary") != std::string::npos || m.source.find("not re-verified") != std::string::npos) score -= 1;
    if (m.params_b > 0 && n_b > 0) score -= 0.5 * std::abs(std::log(m.params_b / n_b));
    if (score > best_score) best_score = score, best = &m;
  }
  return best;
}

// What an extrapolated estimate rests on: the analogs and how far off the prior was on them.
std::string extrapolation_sentence(const PriorParams& p, const QualityInput& in, bool rot_k, const EvidenceBounds& b) {
  const bool rotated = rot_k && rotation_matters(p.type(in.type_k));
  std::string cell = fmt::format("K={}{} V={} on the {} family", in.type_k, rotated ? " (rotated)" : "", in.type_v, in.model->family);
  if (b.analogs.empty())
    return "Extrapolated: no measurement of " + cell + " nor of anything alike; the band is the prior's interval twice over";
  std::string ids;
  for (size_t i = 0; i < b.analogs.size() && i < 6; ++i) ids += (i ? ", " : "") + b.analogs[i]->id;
  if (b.analogs.size() > 6) ids += fmt::format(" and {} more", b.analogs.size() - 6);
  return fmt::format("Extrapolated: no measurement of {}; the band spans what its nearest measured analogs say of the prior "
                     "(they measured x{:.2g} .. x{:.2g} its estimate; data/priors/measurements.csv rows {})", cell, b.lo, b.hi, ids);
}

}  // namespace

double size_factor(const PriorParams& p, double n_b, double exponent) {
  // flat at and above the knee: no measurement shows a model beyond it losing less (docs/priors.md 1.5)
  return std::min(std::pow(std::max(p.size_knee_b / n_b, 1.0), exponent), p.size_clamp_high);
}

double alpha_k(const PriorParams& p, double n_b) {
  return std::min(p.alpha_k * std::pow(p.size_ref_b / n_b, p.alpha_k_size), p.alpha_k_max);
}

double type_loss_k(const PriorParams& p, const TypeSensitivity& t, bool rotated, double n_b) {
  if (!t.quantized()) return 0;
  const double e = t.k_bits - p.bits_ref;
  double a = p.a_k * std::exp(-p.beta_k * e);
  if (!rotated) a *= 1 + p.r_norot * std::exp(-p.beta_norot * e) * size_factor(p, n_b, p.size_exponent_norot);
  return a;
}

double type_loss_v(const PriorParams& p, const TypeSensitivity& t) {
  if (!t.quantized()) return 0;
  return p.a_v * std::exp(-p.beta_v * (t.v_bits - p.bits_ref));
}

double weights_factor(const PriorParams& p, double bpw) {
  if (bpw >= p.weight_bpw_high) return p.w_high;
  if (bpw >= p.weight_bpw_mid) return p.w_mid;
  return p.w_low;
}

namespace {
// Whether a family's K factor reaches type k: the codebooks its own rows measured, and every type of as many
// equivalent bits or fewer than a type of a measured codebook (within the factor's range), since fewer bits never
// lose less: a factor fitted to absmax rows (q4_0; q5_0 is 5.5 bits) reaches q4_1 and iq4_nl but not q5_1, one fitted
// to TurboQuant's lloyd_max (at most 4.33 bits) never reaches q4_0 (tools/fit_priors.py family_covers; docs/priors.md 1.4).
bool family_covers(const PriorParams& p, const FamilyFactor& fam, const TypeSensitivity& k) {
  auto measured = [&](const std::string& codebook) {
    return fam.k_codebooks.empty() || std::find(fam.k_codebooks.begin(), fam.k_codebooks.end(), codebook) != fam.k_codebooks.end();
  };
  if (measured(k.codebook)) return true;
  for (const auto& t : p.types)
    if (t.quantized() && t.k_bits <= fam.k_low_bits_max && t.k_bits >= k.k_bits && measured(t.codebook)) return true;
  return false;
}
}  // namespace

namespace {
// The input's cache types as the prior describes them (looked up by name unless the caller passed them).
const TypeSensitivity& k_sensitivity(const PriorParams& p, const QualityInput& in) {
  return in.k_sensitivity ? *in.k_sensitivity : p.type(in.type_k);
}
const TypeSensitivity& v_sensitivity(const PriorParams& p, const QualityInput& in) {
  return in.v_sensitivity ? *in.v_sensitivity : p.type(in.type_v);
}
}  // namespace

KvParts kv_parts(const PriorParams& p, const QualityInput& in) {
  const TypeSensitivity& k = k_sensitivity(p, in);
  const TypeSensitivity& v = v_sensitivity(p, in);
  const double n_b = params_b(*in.model);
  const bool rot_k = k.always_rotated() || in.rotation;
  const FamilyFactor* fam = p.family(in.model->family);
  const double ctx = attended_context(*in.model, in.ctx);
  KvParts out;
  if (k.quantized()) {
    const double alpha = k.k_bits <= p.low_bits ? alpha_k(p, n_b) : 0;
    double f_rot = 1, f_norot = 1;
    // a family's K factor is fitted to the codebooks its own rows measured, and reaches types of no more bits
    if (fam && k.k_bits <= fam->k_low_bits_max && family_covers(p, *fam, k)) f_rot = fam->k_low_bits_rot, f_norot = fam->k_low_bits_norot;
    // Rotation is never predicted to hurt: a rotated K term is at most the unrotated one (tools/fit_priors.py kv_parts).
    const double unrotated = f_norot * type_loss_k(p, k, false, n_b);
    const double base = rot_k ? std::min(f_rot * type_loss_k(p, k, true, n_b), unrotated) : unrotated;
    out.k = base * size_factor(p, n_b, p.size_exponent_k) * g(p, ctx, alpha);
  }
  if (v.quantized()) {
    const double alpha = v.v_bits <= p.low_bits ? p.alpha_v : 0;
    out.v = size_factor(p, n_b, p.size_exponent_v) * type_loss_v(p, v) * g(p, ctx, alpha);
  }
  if (fam && (k.quantized() || v.quantized())) {
    out.k *= fam->all_bits;
    out.v *= fam->all_bits;
  }
  return out;
}

double kv_loss(const PriorParams& p, const QualityInput& in) {
  KvParts parts = kv_parts(p, in);
  if (const ModelCalibration* c = p.calibration(in.model->id)) {
    parts.k *= c->k_factor;
    parts.v *= c->v_factor;
  }
  return parts.total();
}

Risk risk_band(const PriorParams& p, double loss) {
  if (loss < p.band_free) return Risk::free;
  if (loss < p.band_mild) return Risk::mild;
  if (loss < p.band_noticeable) return Risk::noticeable;
  return Risk::avoid;
}

CellEvidence cell_evidence(const PriorParams& p, const QualityInput& in, bool with_nearest) {
  const bool rot_k = k_sensitivity(p, in).always_rotated() || in.rotation;
  CellEvidence out;
  // The user's own rows cover their model; otherwise a cell no fitted row measures is bounded by its analogs.
  if (!p.calibration(in.model->id)) out.bounds = evidence_bounds(p, in, rot_k);
  out.nearest_known = with_nearest;
  if (with_nearest) out.nearest = nearest_measurement(p, in, rot_k);
  return out;
}

Quality assess(const PriorParams& p, const QualityInput& in, const CellEvidence* cell, bool with_evidence) {
  const ModelSpec& m = *in.model;
  const double n_b = params_b(m);
  const TypeSensitivity& k = k_sensitivity(p, in);
  const TypeSensitivity& v = v_sensitivity(p, in);
  const ModelCalibration* cal = p.calibration(m.id);
  const bool rot_k = k.always_rotated() || in.rotation;
  const CellEvidence own = cell ? CellEvidence{} : cell_evidence(p, in);
  const CellEvidence& known = cell ? *cell : own;
  Quality q;
  q.task_factor = in.task->factor_at(in.ctx);
  q.kv_loss = in.kv_loss >= 0 ? in.kv_loss : kv_loss(p, in);
  // weight losses are measured on LLaMA-3-8B: scaled by (8/N)^0.5 within [0.4, 4] (unchanged from model version 1)
  const double sw = std::clamp(std::sqrt(p.weight_loss_ref_b / n_b), 0.4, 4.0);
  q.weights_loss = in.weights->rel_loss * sw;
  const double w = weights_factor(p, in.weights_bpw);
  q.weights_factor = w;
  const double lo = cal && cal->interval_low > 0 ? cal->interval_low : p.interval_low;
  const double hi = cal && cal->interval_high > 0 ? cal->interval_high : p.interval_high;
  constexpr double kWeightsSpread = 2;  // one reference model (LLaMA-3-8B) for every family
  double kv_low = q.kv_loss * lo, kv_high = q.kv_loss * hi;
  const EvidenceBounds& bounds = known.bounds;
  q.extrapolated = bounds.extrapolated;
  // The estimate itself stays the prior's, so that its orderings hold in every cell (more bits, rotation, K over V);
  // the band spans what the analogs say of the prior, widened by its interval.
  if (bounds.extrapolated && !bounds.analogs.empty()) {
    kv_low = q.kv_loss * std::min(bounds.lo, 1.0) * lo, kv_high = q.kv_loss * std::max(bounds.hi, 1.0) * hi;
  } else if (bounds.extrapolated) {
    kv_low = 0, kv_high = q.kv_loss * hi * hi;  // nothing measured is alike: the interval twice over
  }
  const double cache = q.task_factor * w * q.kv_loss;
  q.expected_loss = q.weights_loss + cache;
  q.low = q.weights_loss / kWeightsSpread + q.task_factor * w * kv_low;
  q.high = q.weights_loss * kWeightsSpread + q.task_factor * w * kv_high;
  q.risk = risk_band(p, q.expected_loss);
  if (!with_evidence) return q;
  q.analogs.reserve(bounds.analogs.size());
  for (const AnalogRow* a : bounds.analogs) q.analogs.push_back(a->id);

  // The evidence each part rests on: the user's own measurements, the closest published measurement, then the
  // general findings that apply.
  if (cal)
    for (const auto& e : cal->evidence) q.evidence.push_back(e);
  if (const MeasuredEvidence* e = known.nearest_known ? known.nearest : nearest_measurement(p, in, rot_k))
    q.evidence.push_back("Closest measurement: " + e->text + " [" + e->source + "]");
  if (q.extrapolated) q.evidence.push_back(extrapolation_sentence(p, in, rot_k, bounds));
  auto cite = [&](const std::string& id) {
    if (const Evidence* e = p.find_evidence(id)) q.evidence.push_back(e->text + " [" + e->source + "]");
  };
  const bool any_quantized = k.quantized() || v.quantized();
  const bool k_low = k.quantized() && k.k_bits <= p.low_bits;
  const bool v_low = v.quantized() && v.v_bits <= p.low_bits;
  if (k_low) {
    cite("k4_vs_v4");
    if (attended_context(*in.model, in.ctx) > p.ctx_floor) cite("k4_ctx_growth");
    if (rot_k) cite("k4_rotation");
  } else if ((in.rotation || k.rotation == "builtin") && k.quantized() && k.k_bits < 8) {
    cite("k4_rotation");  // a 5-6-bit K that is rotated; not a float type that is merely robust to outliers (fp8)
  }
  if (!k_low && v_low) cite("v4_cheap");
  if ((k.quantized() && k.k_bits >= 8) || (v.quantized() && v.v_bits >= 8)) cite("q8_free");
  if (const FamilyFactor* f = p.family(m.family)) {
    if (m.family == "qwen2" && k.quantized() && k.k_bits <= f->k_low_bits_max) cite("qwen2_outliers");
    if (f->all_bits > 1 && any_quantized) cite("sinks_swa");
  }
  if (q.task_factor > 3 && any_quantized) cite("tool_calls_long_ctx");
  if (const WeightFormat& wf = *in.weights; wf.rel_loss > 0) {
    // a format without its own measurement borrows a GGUF format's (quality_as): say whose figure it is
    const std::string stand_in = wf.quality_as.empty() ? "" : fmt::format(" (taken as {}'s)", wf.quality_as);
    q.evidence.push_back(fmt::format("{} weights: +{} perplexity on LLaMA-3-8B{}{} [{}]", wf.id, pct(wf.rel_loss), stand_in,
                                     wf.rel_loss_estimate && stand_in.empty() ? " (estimate)" : "",
                                     wf.quality_source.empty() ? "data/weights" : "llama.cpp PR #6936"));
  }
  return q;
}

}  // namespace kvplan::priors

// The parametric prior of data/priors/prior.yaml (documented in docs/priors.md):
//   L_kv = F_family · S(N) · [ a_K(type_k, rot) · g_K(ctx) + a_V(type_v) · g_V(ctx) ]
//   L    = L_weights · S_w(N) + T_task(ctx) · W(bpw) · L_kv
// The task factor scales the cache part only: the strictness evidence (tool calls, long reasoning)
// measures cache quantization, while weight-format losses are measured as plain perplexity.
#include "priors/prior.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kvplan::priors {
namespace {

double params_b(const ModelSpec& m) { return static_cast<double>(m.params) / 1e9; }

double g(double ctx, double ctx_ref, double alpha) { return std::pow(std::max(ctx, ctx_ref) / ctx_ref, alpha); }

double family_factor(const PriorParams& p, const ModelSpec& m, const TypeSensitivity& k, bool any_quantized, bool rotation) {
  const FamilyFactor* f = p.family(m.family);
  if (!f) return 1;
  double factor = any_quantized ? f->all_bits : 1;
  if (k.bits <= f->k_low_bits_max) factor *= rotation ? f->k_low_bits_rot : f->k_low_bits_norot;
  return factor;
}

double weights_factor(const PriorParams& p, double bpw) {
  if (bpw >= p.weight_bpw_high) return p.w_high;
  if (bpw >= p.weight_bpw_mid) return p.w_mid;
  return p.w_low;
}

std::string pct(double x) {
  if (x < 0.001) return fmt::format("{:.2f}%", x * 100);
  if (x < 0.1) return fmt::format("{:.1f}%", x * 100);
  return fmt::format("{:.0f}%", x * 100);
}

}  // namespace

double size_factor(const PriorParams& p, double n_b) {
  return std::clamp(std::pow(p.size_ref_b / n_b, p.size_exponent), p.size_clamp_low, p.size_clamp_high);
}

double alpha_k(const PriorParams& p, double n_b) {
  if (n_b < p.alpha_k_small_below_b) return p.alpha_k_small;
  if (n_b <= p.alpha_k_mid_upto_b) return p.alpha_k_mid;
  if (n_b >= p.alpha_k_large_from_b) return p.alpha_k_large;
  // log-linear between the mid and large anchors
  const double t = std::log(n_b / p.alpha_k_mid_upto_b) / std::log(p.alpha_k_large_from_b / p.alpha_k_mid_upto_b);
  return p.alpha_k_mid + t * (p.alpha_k_large - p.alpha_k_mid);
}

double kv_loss(const PriorParams& p, const QualityInput& in) {
  const TypeSensitivity& k = p.type(in.type_k);
  const TypeSensitivity& v = p.type(in.type_v);
  const double n_b = params_b(*in.model);
  const bool rot = in.rotation;
  const double a_k = rot ? k.a_k_rot : k.a_k_norot;
  const double alpha_kk = k.bits <= p.low_bits ? alpha_k(p, n_b) : 0;
  const double alpha_vv = v.bits <= p.low_bits ? p.alpha_v_low : 0;
  const bool any_quantized = k.a_k_norot > 0 || v.a_v > 0;
  return family_factor(p, *in.model, k, any_quantized, rot) * size_factor(p, n_b) *
         (a_k * g(in.ctx, p.ctx_ref, alpha_kk) + v.a_v * g(in.ctx, p.ctx_ref, alpha_vv));
}

Risk risk_band(const PriorParams& p, double loss) {
  if (loss < p.band_free) return Risk::free;
  if (loss < p.band_mild) return Risk::mild;
  if (loss < p.band_noticeable) return Risk::noticeable;
  return Risk::avoid;
}

Quality assess(const PriorParams& p, const QualityInput& in) {
  const ModelSpec& m = *in.model;
  const double n_b = params_b(m);
  const TypeSensitivity& k = p.type(in.type_k);
  const TypeSensitivity& v = p.type(in.type_v);
  Quality q;
  q.task_factor = in.task->factor_at(in.ctx);
  q.kv_loss = kv_loss(p, in);
  const double sw = std::clamp(std::pow(p.weight_loss_ref_b / n_b, 0.5), p.size_clamp_low, p.size_clamp_high);
  q.weights_loss = in.weights->rel_loss * sw;
  const double w = weights_factor(p, in.weights_bpw);
  q.weights_factor = w;
  const double spread = std::max(k.spread, v.spread);
  constexpr double kWeightsSpread = 2;  // one reference model (LLaMA-3-8B) for every family
  q.expected_loss = q.weights_loss + q.task_factor * w * q.kv_loss;
  q.low = q.weights_loss / kWeightsSpread + q.task_factor * w * q.kv_loss / spread;
  q.high = q.weights_loss * kWeightsSpread + q.task_factor * w * q.kv_loss * spread;
  q.risk = risk_band(p, q.expected_loss);

  // The evidence each part rests on.
  auto cite = [&](const std::string& id) {
    if (const Evidence* e = p.find_evidence(id)) q.evidence.push_back(e->text + " [" + e->source + "]");
  };
  const bool k_low = k.bits <= p.low_bits;
  const bool v_low = v.bits <= p.low_bits;
  if (k_low) {
    cite("k4_vs_v4");
    if (in.ctx > p.ctx_ref) cite("k4_ctx_growth");
    if (in.rotation) cite("k4_rotation");
  } else if (k.a_k_norot > 0 && k.bits < 8) {
    cite("k4_rotation");
  }
  if (!k_low && v_low) cite("v4_cheap");
  if ((k.bits >= 8 && k.a_k_norot > 0) || (v.bits >= 8 && v.a_v > 0)) cite("q8_free");
  if (const FamilyFactor* f = p.family(m.family)) {
    if (m.family == "qwen2" && k.bits <= f->k_low_bits_max) cite("qwen2_outliers");
    if (f->all_bits > 1 && (k.a_k_norot > 0 || v.a_v > 0)) cite("sinks_swa");
  }
  if (q.task_factor > 3 && (k.a_k_norot > 0 || v.a_v > 0)) cite("tool_calls_long_ctx");
  if (in.weights->rel_loss > 0) {
    q.evidence.push_back(fmt::format("{} weights: +{} perplexity on LLaMA-3-8B{} [{}]", in.weights->id, pct(in.weights->rel_loss),
                                     in.weights->rel_loss_estimate ? " (estimate)" : "",
                                     in.weights->quality_source.empty() ? "data/weights" : "llama.cpp PR #6936"));
  }
  return q;
}

}  // namespace kvplan::priors

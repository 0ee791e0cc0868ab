// The one-line reason of an option, the ranking order and dominance (docs/ranking.md §5, §7).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

std::string describe_k(const std::string& k, double bits) {
  if (bits >= 16) return k + " K (lossless)";
  if (bits >= 8) return "8-bit K";
  return fmt::format("{}-bit K", bits >= 5.5 ? 5 : 4);
}


}  // namespace

std::string reason_for(const Setup& s, const Option& o) {
  const auto& prior = s.catalog->prior;
  const double kb = k_bits(s, o.cache_type_k), vb = v_bits(s, o.cache_type_v);
  std::vector<std::string> parts;
  const int target = s.target_ctx;
  if (o.below_task_min) parts.push_back(fmt::format("below the task minimum of {}", s.min_ctx));
  else if (o.ctx_per_slot >= target) parts.push_back(fmt::format("reaches the {} target", target));
  else parts.push_back(fmt::format("ctx < {} target", target));
  if (o.sum("k_cache") + o.sum("swa_k_cache") == 0) {
    parts.push_back("no KV cache: recurrent state only");
  } else {
    const double stored = std::floor(k_storage_bits(s, o.cache_type_k));  // fp8: 8, exl2 Q6 K: 8, exl3 6: 6
    parts.push_back(!s.own_memory ? describe_k(o.cache_type_k, kb)
                    : stored >= 16 ? o.cache_type_k + " K (lossless)" : fmt::format("{}-bit K", static_cast<int>(stored)));
    if (kb <= prior.low_bits) parts.push_back("keys degrade with context");
    else if (vb < kb) parts.push_back("V compressed first");
  }
  if (!o.flash_attn) parts.push_back("no flash attention");
  if (o.beyond_native) parts.push_back(o.ctx_per_slot > s.model->max_ctx() || !s.model->rope_scaling ? "past the model's window" : "rope-scaled");
  if (o.n_cpu_moe) parts.push_back(fmt::format("experts of {} layers in RAM", *o.n_cpu_moe));
  if (o.n_gpu_layers && *o.n_gpu_layers >= 0 && *o.n_gpu_layers <= s.model->layers)
    parts.push_back(fmt::format("{} layers on the GPU", *o.n_gpu_layers));
  for (const auto& n : o.needs) parts.push_back("needs " + n);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

// ---- the ranking objective (docs/ranking.md §5) ----
// score = w_ctx · ln(min(ctx, target) / target)            context short of the target costs, beyond it nothing
//       − ln(1 + L)                                         L: the cautious loss, √(expected · 80 % upper bound)
//       − w_slow · ln(floor / decode)  below the floor      a task that is unusable slowly
//       + w_fast · ln(min(decode, 4 · floor) / floor)      faster still helps a little, up to 4× the floor
//       − w_ttft · ln(ttft / ttft_max)  above the maximum   prefill of a prompt as long as the context
//       (speed unknown: − w_slow · ln(1 / relative), relative = the decode speed against all bytes in device memory)
// in max_context mode the context term is ln(ctx) with weight 1 (the longest context decides). Tiers before the
// score: acceptable (risk below avoid) first; in max-context mode mild or better next; then options at or above the
// task minimum, then (K not pinned)
// keys above the prior's low_bits: K is starved last.
namespace {
constexpr double kWeightContext = 0.05;  // half the target context costs as much as +3.5 % loss
constexpr double kWeightSlow = 0.25;     // half the floor's speed costs as much as +19 % loss
constexpr double kStepSlow = 0.01;       // and falling below the floor at all costs +1 % at once: a little under it
                                         // loses to just over it at nearly the same loss
constexpr double kWeightFast = 0.02;     // twice the floor's speed is worth 1.4 % loss
constexpr double kWeightTtft = 0.025;    // twice the first-token limit costs +1.7 % loss: less than halving context
constexpr double kFastCap = 4;
}  // namespace

double cautious_loss(const Quality& q) {
  const double e = std::max(0.0, q.expected_loss), h = q.high;
  return h > e ? std::sqrt(e * h) : e;
}
double cautious_loss(const Option& o) { return cautious_loss(o.quality); }

double context_term(int ctx_per_slot, int target) {
  const double ctx = std::max(1, ctx_per_slot);
  return kWeightContext * std::log(std::min(ctx, static_cast<double>(target)) / target);
}

double speed_term(const Setup& s, double decode_tps, double decode_relative) {
  const double floor = s.task->decode_floor_tps;
  if (decode_tps > 0 && floor > 0) {
    if (decode_tps < floor) return -(kStepSlow + kWeightSlow * std::log(floor / decode_tps));
    return kWeightFast * std::log(std::min(decode_tps, kFastCap * floor) / floor);
  }
  if (decode_relative < 1) return kWeightSlow * std::log(decode_relative);  // speed unknown: what RAM costs against device memory
  return 0;
}

double objective(const Setup& s, const Option& o, bool max_context) {
  const double ctx = std::max(1, o.ctx_per_slot);
  double score = max_context ? std::log(ctx) : context_term(o.ctx_per_slot, s.target_ctx);
  score -= std::log1p(cautious_loss(o));
  score += speed_term(s, o.decode_tps, o.decode_relative);
  if (o.ttft_s > 0 && s.task->ttft_max_s > 0 && o.ttft_s > s.task->ttft_max_s) score -= kWeightTtft * std::log(o.ttft_s / s.task->ttft_max_s);
  return score;
}

bool ranks_by_max_context(const Setup& s) {
  // the longest context (max-context mode) is the longest at which quality stays mild or better, when one is
  return s.request.max_ctx || (s.request.cache_type_k && s.request.cache_type_v && !s.request.ctx_size);
}

Tier rank_tier_bits(const Setup& s, Risk risk, bool below_task_min, double k_bits) {
  // 4-bit keys only after every 8-bit-K option that reaches the task minimum (unless K was pinned)
  const bool k_free = !s.request.cache_type_k;
  return {risk == Risk::avoid, ranks_by_max_context(s) && risk > Risk::mild, below_task_min, k_free && k_bits <= s.catalog->prior.low_bits};
}

Tier rank_tier(const Setup& s, Risk risk, bool below_task_min, const std::string& k) {
  return rank_tier_bits(s, risk, below_task_min, k_bits(s, k));
}

// Tiers, then the objective, then headroom (a safety term), then a stable tie-break.
bool ranks_before(const Setup& s, const Option& a, const Option& b) {
  return ranks_before(s, a, rank_tier(s, a.quality.risk, a.below_task_min, a.cache_type_k), b,
                      rank_tier(s, b.quality.risk, b.below_task_min, b.cache_type_k));
}

bool ranks_before(const Setup& s, const Option& a, const Tier& ta, const Option& b, const Tier& tb) {
  if (ta != tb) return ta < tb;
  if (a.score != b.score) return a.score > b.score;
  const Bytes ha = a.device_headroom(), hb = b.device_headroom();
  if (ha != hb) return ha > hb;
  // Deterministic tie-break: flash attention on, then the catalog's order of formats and types.
  if (a.flash_attn != b.flash_attn) return a.flash_attn;
  auto order = [&](const Option& o) {
    const auto& f = s.own_memory ? s.runtime->weight_formats : s.catalog->weight_formats;
    const auto t = cache_type_ids(s);
    auto pos = [](const auto& v, const auto& pred) { return std::find_if(v.begin(), v.end(), pred) - v.begin(); };
    return std::make_tuple(pos(f, [&](const WeightFormat& w) { return w.id == o.weights; }),
                           pos(t, [&](const std::string& x) { return x == o.cache_type_k; }),
                           pos(t, [&](const std::string& x) { return x == o.cache_type_v; }),
                           o.n_cpu_moe.value_or(0), -o.n_gpu_layers.value_or(1 << 20));
  };
  return order(a) < order(b);
}

Standing standing(const Setup& s, const Option& o, bool max_context) {
  const int t = max_context ? (1 << 30) : s.target_ctx;
  return {std::min(o.ctx_per_slot, t), cautious_loss(o), o.device_headroom(), o.decode_tps, o.decode_relative,
          static_cast<int>(o.quality.risk)};
}

// b dominates a: at least as good on everything the objective counts and on headroom, strictly better on one.
bool dominates(const Standing& b, const Standing& a) {
  const bool known = a.decode_tps > 0 && b.decode_tps > 0;  // else what RAM costs stands in for the speed
  const double da = known ? a.decode_tps : a.decode_relative, db = known ? b.decode_tps : b.decode_relative;
  return b.risk <= a.risk && b.ctx >= a.ctx && b.loss <= a.loss && b.headroom >= a.headroom && db >= da &&
         (b.ctx > a.ctx || b.loss < a.loss || b.headroom > a.headroom || db > da);
}

// The options no other dominates (indices into standings). Where every option's speed is on one scale (all decode
// rates known, or none), dominance is a strict partial order and a lexicographic order lists every dominator before
// what it dominates: each option is then checked against those kept so far only (a dominated option's maximal
// dominator is kept and comes first). Otherwise (speed known for some, or a figure not a number) each is checked
// against all.
std::vector<size_t> undominated(const std::vector<Standing>& standings) {
  std::vector<size_t> order(standings.size()), kept;
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto known = std::count_if(standings.begin(), standings.end(), [](const Standing& x) { return x.decode_tps > 0; });
  // a loss or speed that is not a number has no place in a lexicographic order: every pair is checked then
  const bool ordered = std::all_of(standings.begin(), standings.end(), [](const Standing& x) {
    return std::isfinite(x.loss) && std::isfinite(x.decode_tps) && std::isfinite(x.decode_relative);
  });
  if (!ordered || (known != 0 && known != static_cast<long>(standings.size()))) {
    for (size_t j : order)
      if (std::none_of(standings.begin(), standings.end(), [&](const Standing& b) { return dominates(b, standings[j]); }))
        kept.push_back(j);
    return kept;
  }
  auto speed = [&](const Standing& x) { return known ? x.decode_tps : x.decode_relative; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Standing &x = standings[a], &y = standings[b];
    return std::make_tuple(x.risk, x.loss, -static_cast<long long>(x.ctx), -x.headroom, -speed(x)) <
           std::make_tuple(y.risk, y.loss, -static_cast<long long>(y.ctx), -y.headroom, -speed(y));
  });
  for (size_t j : order)
    if (std::none_of(kept.begin(), kept.end(), [&](size_t b) { return dominates(standings[b], standings[j]); })) kept.push_back(j);
  std::sort(kept.begin(), kept.end());  // the caller's order
  return kept;
}

std::vector<size_t> ranked(const Setup& s, const std::vector<const Option*>& fitting, bool max_context, size_t count) {
  const bool any_at_min = std::any_of(fitting.begin(), fitting.end(), [](const Option* o) { return !o->below_task_min; });
  std::vector<size_t> candidates;  // indices into fitting
  for (size_t i = 0; i < fitting.size(); ++i)
    if (!any_at_min || !fitting[i]->below_task_min) candidates.push_back(i);
  std::vector<Standing> standings;
  standings.reserve(candidates.size());
  for (size_t i : candidates) standings.push_back(standing(s, *fitting[i], max_context));
  std::vector<size_t> kept = undominated(standings);
  for (size_t& k : kept) k = candidates[k];
  std::vector<Tier> tiers(fitting.size());  // each option's once: the sort compares each several times
  for (size_t k : kept) tiers[k] = rank_tier(s, fitting[k]->quality.risk, fitting[k]->below_task_min, fitting[k]->cache_type_k);
  std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return ranks_before(s, *fitting[a], tiers[a], *fitting[b], tiers[b]); });
  kept.resize(std::min(kept.size(), count));
  return kept;
}

}  // namespace kvplan::detail

// The one-line reason of an option, the ranking order and dominance (docs/ranking.md §5, §7).
#include <algorithm>
#include <cmath>
#include <string>
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
  const int target = s.task->ctx_target;
  if (o.below_task_min) parts.push_back(fmt::format("below the task minimum of {}", s.task->ctx_min));
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
  if (o.beyond_native) parts.push_back("rope-scaled");
  for (const auto& n : o.needs) parts.push_back("needs " + n);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

// Ranking rule (docs/ranking.md): options at or above the task minimum first; then the risk band;
// then context towards the target; then expected loss; then headroom; then a stable tie-break.
bool ranks_before(const Setup& s, const Option& a, const Option& b) {
  const int target = s.task->ctx_target;
  auto key = [&](const Option& o) {
    return std::make_tuple(o.below_task_min, static_cast<int>(o.quality.risk), -std::min(o.ctx_per_slot, target));
  };
  if (key(a) != key(b)) return key(a) < key(b);
  if (a.quality.expected_loss != b.quality.expected_loss) return a.quality.expected_loss < b.quality.expected_loss;
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
                           pos(t, [&](const std::string& x) { return x == o.cache_type_v; }));
  };
  return order(a) < order(b);
}

// b dominates a: as much context (towards the target), no more loss, no less headroom, one strictly better.
bool dominates(const Setup& s, const Option& b, const Option& a) {
  const int t = s.task->ctx_target;
  const int ca = std::min(a.ctx_per_slot, t), cb = std::min(b.ctx_per_slot, t);
  const double la = a.quality.expected_loss, lb = b.quality.expected_loss;
  const Bytes ha = a.device_headroom(), hb = b.device_headroom();
  return cb >= ca && lb <= la && hb >= ha && (cb > ca || lb < la || hb > ha);
}



}  // namespace kvplan::detail

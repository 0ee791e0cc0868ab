// What no sizing of a candidate can beat (docs/ranking.md §5, "Sizing best bound first"): its best tier, its
// highest objective and its best standing, from its weights and cache types alone. The ranking sizes candidates
// best bound first and leaves unsized those that could neither be shown nor remove an option shown.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

// The task's cache factor never falls as the context grows: checked at every band's edges.
bool task_factor_grows(const TaskProfile& t) {
  std::vector<int> at = {1, INT_MAX};
  for (const auto& band : t.strictness)
    if (band.upto > 0) at.push_back(band.upto), at.push_back(band.upto < INT_MAX ? band.upto + 1 : band.upto);
  std::sort(at.begin(), at.end());
  for (size_t i = 1; i < at.size(); ++i)
    if (t.factor_at(at[i]) < t.factor_at(at[i - 1])) return false;
  return true;
}

}  // namespace

bool bounds_apply(const Setup& s) {
  // llama.cpp's memory model on one device (and host RAM): decode_bound's pools
  if (s.own_memory || s.gpu_pools.size() > 1 || s.pools.size() > 2 || s.pool_index(s.device_pool) >= s.pools.size() ||
      s.pool_index(s.host_pool) >= s.pools.size() || (s.pools.size() == 2 && s.device_pool == s.host_pool))
    return false;
  // The prior's loss is then least at the shortest context and the most bits per weight: its context growth and
  // the task's factor never fall with the context, its weights factor never rises with the bits (a --data prior
  // may say otherwise, and is then sized in full).
  const PriorParams& p = s.catalog->prior;
  return p.alpha_k >= 0 && p.alpha_k_max >= 0 && p.alpha_v >= 0 && p.ctx_floor > 0 && p.w_high <= p.w_mid &&
         p.w_mid <= p.w_low && p.weight_bpw_high >= p.weight_bpw_mid && task_factor_grows(*s.task);
}

RankBound rank_bound(const Setup& s, const Candidate& c, int ctx_per_slot, const DecodeBound& speed, double most_ctx) {
  // the most bits per weight any placement of these weights has (weights_bpw less nothing for tied embeddings);
  // weights not sized yet: any number of bits (the weights factor at its least)
  const WeightBytes* w = c.weight_bytes.get();
  const double bpw = w ? static_cast<double>(w->device.unpadded + w->host.unpadded) * 8 / static_cast<double>(s.model->params) : HUGE_VAL;
  Setup::ScoreCell& cell = score_cell(s, c);
  const Quality least = quality_in(s, c, cell, ctx_per_slot, bpw);
  const double floor = s.task->decode_floor_tps;
  // the speed term at its highest: the known rate's, or where the rate may be unknown, the larger of it and the
  // relative speed's (objective: the first applies when the rate and the floor are known)
  const double known_rate = floor > 0 && speed.tps > 0 ? speed_term(s, speed.tps, 1) : -HUGE_VAL;
  const double unknown_rate = speed_term(s, 0, speed.relative);
  const double fastest = speed.tps_unknown ? unknown_rate : speed.tps_certain && floor > 0 ? known_rate : std::max(known_rate, unknown_rate);
  // an option's context is a whole number of tokens, at most the bound's
  const int most = most_ctx < s.target_ctx ? static_cast<int>(std::floor(std::max(0.0, most_ctx))) : s.target_ctx;
  RankBound b;
  b.tier = rank_tier_bits(s, least.risk, most < s.min_ctx, cell.k->k_bits);  // cell.k: k_bits's type
  // the context term at its most (0 where the target may be reached), no time-to-first-token cost
  b.score = context_term(most, s.target_ctx) - std::log1p(cautious_loss(least)) + fastest;
  b.risk = static_cast<int>(least.risk);
  b.loss = cautious_loss(least);
  b.decode_tps = speed.tps;
  b.decode_relative = speed.relative;
  return b;
}

ShownOptions::ShownOptions(const Setup& s, std::vector<const Option*> first, bool max_context) : options(std::move(first)) {
  standings.reserve(options.size());
  for (const Option* o : options) standings.push_back(standing(s, *o, max_context));
  if (!options.empty()) last_tier = rank_tier(s, options.back()->quality.risk, options.back()->below_task_min, options.back()->cache_type_k);
}

bool cannot_show(const RankBound& b, const ShownOptions& shown) {
  if (shown.options.empty()) return false;
  const Option& last = *shown.options.back();
  // the bound's context is the task minimum: an option below it is ranked only when none reaches it
  if (last.below_task_min) return false;
  if (b.tier < shown.last_tier || (b.tier == shown.last_tier && !(b.score < last.score))) return false;
  // and it dominates none of them (dominates: no worse risk, loss and speed are needed; context and headroom unknown)
  for (const Standing& y : shown.standings) {
    const bool slower = b.decode_relative < y.decode_relative && (y.decode_tps <= 0 || b.decode_tps < y.decode_tps);
    if (!(b.risk > y.risk || b.loss > y.loss || slower)) return false;
  }
  return true;
}

}  // namespace kvplan::detail

// Why the recommendation: the K/V reasoning with the evidence behind it (docs/ranking.md §7).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner/setup.hpp"

namespace kvplan::detail {

std::string loss_pct(double x) { return x < 0.001 ? fmt::format("{:.2f}%", x * 100) : fmt::format("{:.1f}%", x * 100); }

namespace {

std::string evidence_text(const Setup& s, const std::string& id) {
  const Evidence* e = s.catalog->prior.find_evidence(id);
  return e ? e->text + " [" + e->source + "]" : std::string{};
}

// The K line: why K has the bits it has, and what squeezing it to 4 bits would give with the same weights.
std::string k_line(const Setup& s, const Option& best, const std::vector<const Option*>& all) {
  const auto& prior = s.catalog->prior;
  const double kb = k_bits(s, best.cache_type_k);
  const Option* low_k = nullptr;
  for (const Option* o : all)
    if (o->weights == best.weights && k_bits(s, o->cache_type_k) <= prior.low_bits &&
        (!low_k || o->ctx_per_slot > low_k->ctx_per_slot ||
         (o->ctx_per_slot == low_k->ctx_per_slot && o->quality.expected_loss < low_k->quality.expected_loss)))
      low_k = o;
  const auto ids = cache_type_ids(s);
  const bool low_k_possible = std::any_of(ids.begin(), ids.end(), [&](const std::string& t) { return k_bits(s, t) <= prior.low_bits; });
  if (kb > prior.low_bits && !low_k_possible)
    return fmt::format("K is at {}: {} offers no 4-bit key cache, the safe side: {}.", best.cache_type_k, s.resolved.engine,
                       evidence_text(s, "k4_vs_v4"));
  if (kb > prior.low_bits) {
    std::string line = fmt::format("K stays at {} rather than 4 bits: {}.", best.cache_type_k, evidence_text(s, "k4_vs_v4"));
    if (low_k)
      line += fmt::format(" Here K={} V={} would run {} tokens at ~{} expected loss ({}).", low_k->cache_type_k, low_k->cache_type_v,
                          low_k->ctx_per_slot, loss_pct(low_k->quality.expected_loss), risk_name(low_k->quality.risk));
    return line;
  }
  if (s.request.cache_type_k)
    return fmt::format("K is at {} as asked: expect degradation as context grows ({}).", best.cache_type_k, evidence_text(s, "k4_ctx_growth"));
  return fmt::format("K is at {}: nothing with 8-bit keys fits; expect degradation as context grows ({}).", best.cache_type_k,
                     evidence_text(s, "k4_ctx_growth"));
}

// The weights: what the more precise format would have cost in context (the same cache types; the one
// reaching the longest context). Empty when no such trade was made.
std::string weights_line(const Option& best, const std::vector<const Option*>& all) {
  const Option* least_loss = nullptr;
  for (const Option* o : all)
    if (o->cache_type_k == best.cache_type_k && o->cache_type_v == best.cache_type_v && o->flash_attn == best.flash_attn &&
        o->quality.weights_loss < best.quality.weights_loss &&
        (!least_loss || o->ctx_per_slot > least_loss->ctx_per_slot ||
         (o->ctx_per_slot == least_loss->ctx_per_slot && o->quality.weights_loss < least_loss->quality.weights_loss)))
      least_loss = o;
  if (!least_loss || least_loss->ctx_per_slot >= best.ctx_per_slot) return {};
  return fmt::format("Weights {} rather than the more precise {}: with the same cache {} reaches only {} tokens here.", best.weights,
                     least_loss->weights, least_loss->weights, least_loss->ctx_per_slot);
}

// Context short of the task's target: what reaching it would take.
std::string context_line(const Setup& s, const Option& best, const std::vector<const Option*>& all) {
  const int target = s.target_ctx;
  if (best.ctx_per_slot >= target) return {};
  const Option* at_target = nullptr;
  for (const Option* o : all)
    if (o->ctx_per_slot >= target && (!at_target || ranks_before(s, *o, *at_target))) at_target = o;
  const std::string alt = at_target ? fmt::format(" Reaching {} tokens takes {} weights with K={} V={} ({}, ~{}).", target, at_target->weights,
                                                  at_target->cache_type_k, at_target->cache_type_v, risk_name(at_target->quality.risk),
                                                  loss_pct(at_target->quality.expected_loss))
                                    : fmt::format(" Nothing reaches {} tokens on this device.", target);
  return fmt::format("Context is {} of the task's {} per conversation: kvplan shortens context before starving K.{}", best.ctx_per_slot,
                     target, alt);
}

}  // namespace

std::vector<std::string> explain(const Setup& s, const Option& best, const std::vector<const Option*>& all) {
  std::vector<std::string> lines = {k_line(s, best, all)};
  if (v_bits(s, best.cache_type_v) < k_bits(s, best.cache_type_k))
    lines.push_back(fmt::format("V is compressed first ({}): {}.", best.cache_type_v, evidence_text(s, "v4_cheap")));
  for (const std::string& line : {weights_line(best, all), context_line(s, best, all)})
    if (!line.empty()) lines.push_back(line);
  for (const auto& e : best.quality.evidence)
    if (std::none_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(e.substr(0, 40)) != std::string::npos; }))
      lines.push_back("Evidence: " + e);
  return lines;
}

}  // namespace kvplan::detail

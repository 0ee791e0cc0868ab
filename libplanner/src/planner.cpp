// plan(): resolve → enumerate → account → fit → score → rank. Pure: the same catalog and request
// always give the same plan. Each stage has its own file in planner/ (setup.hpp lists them).
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "kvplan/plan.hpp"
#include "planner/setup.hpp"
#include "planner/sizing.hpp"

namespace kvplan {

const char* risk_name(Risk r) {
  switch (r) {
    case Risk::free: return "free";
    case Risk::mild: return "mild";
    case Risk::noticeable: return "noticeable";
    case Risk::avoid: return "avoid";
  }
  return "?";
}

Bytes Option::sum(const std::string& what, const std::string& pool) const {
  Bytes b = 0;
  for (const auto& a : allocations)
    if (a.what == what && (pool.empty() || a.pool == pool)) b += a.figure.bytes;
  return b;
}
Bytes Option::kv_total(const std::string& pool) const {
  Bytes b = 0;
  for (const auto& a : allocations)
    if (detail::is_kv_part(a.what) && (pool.empty() || a.pool == pool)) b += a.figure.bytes;
  return b;
}
const PoolUsage& Option::usage(const std::string& pool) const {
  for (const auto& p : pools)
    if (p.pool == pool) return p;
  throw std::out_of_range("no pool " + pool);
}
Bytes Option::device_total() const {
  Bytes t = 0;
  for (const auto& u : pools)
    if (u.pool != "host") t += u.total;
  return t;
}
Bytes Option::device_headroom() const {
  Bytes h = pools.front().headroom;
  for (const auto& u : pools)
    if (u.pool != "host") h = std::min(h, u.headroom);
  return h;
}
bool Option::fits() const {
  return std::all_of(pools.begin(), pools.end(), [](const PoolUsage& p) { return p.headroom >= 0; });
}

namespace detail {
namespace {

const char* mode_of(const Request& r) {
  const bool types_pinned = r.cache_type_k && r.cache_type_v;
  if (r.ctx_size && types_pinned && r.weights) return "single";
  if (r.ctx_size) return "best_types";
  if (types_pinned || r.max_ctx) return "max_context";
  return "rank";
}

// Warnings an option carries: off the fast path, layers or experts in RAM, rope scaling, a native stop.
// vLLM/SGLang: what the scheduler admits against what the pool holds, and a checkpoint the user must supply.
void serving_warnings(const Setup& s, const Candidate& c, const Option& o, std::vector<std::string>& w) {
  if (!s.runtime || (s.runtime->kind != "vllm" && s.runtime->kind != "sglang")) return;
  const Resolved& r = s.resolved;
  if (r.max_num_seqs > 0 && o.max_concurrency > 0 && o.max_concurrency < r.max_num_seqs)
    w.push_back(fmt::format("{} admits up to {} sequences{}, and its KV pool holds {:.1f} of {} tokens: more concurrent full-length "
                            "requests wait in the queue, and running ones are preempted (their blocks freed and recomputed) when "
                            "blocks run out; shorter requests take proportionally fewer blocks",
                            s.runtime->name, r.max_num_seqs, r.data_parallel > 1 ? " per replica" : "", o.max_concurrency, o.ctx_per_slot));
  if (!has_checkpoint(s, *c.weights))
    w.push_back(fmt::format("no {} checkpoint of {} is known to kvplan (data/engines/checkpoints.yaml): supply one whose "
                            "config.json carries its quantization_config", c.weights->id, s.model->name));
}

std::vector<std::string> option_warnings(const Setup& s, const Candidate& c, const Option& o, const std::string& mode, bool at_cap) {
  const ModelSpec& m = *s.model;
  const Placement& place = c.placement;
  std::vector<std::string> w;
  if (c.slow) w.push_back(c.slow_reason);
  if (place.first_gpu_layer > 0 || !place.output_on_gpu)
    w.push_back(fmt::format("{} of {} layers{} run on the CPU from RAM: decoding is bound by host memory bandwidth",
                            std::min(place.first_gpu_layer, m.layers), m.layers, place.output_on_gpu ? "" : " and the output layer"));
  if (place.cpu_moe_layers > 0)
    w.push_back(fmt::format("the experts of {} layers stay in RAM: each token reads its active experts from host memory",
                            place.cpu_moe_layers));
  if (place.host_matmuls() && s.pools.back().kind == "host" && !s.request.host_ram)
    w.push_back(fmt::format("host RAM assumed {} (give --ram): this option keeps {} in RAM", format_size(kAssumedHostRam),
                            format_size(o.usage(s.pools.back().id).allocations)));
  if (o.beyond_native && o.ctx_per_slot <= m.max_ctx() && m.rope_scaling)
    w.push_back(fmt::format("{} tokens is beyond the native {}: uses {} rope scaling (quality past the native window is "
                            "the model's, not measured here)", o.ctx_per_slot, m.ctx_native, m.rope_scaling ? m.rope_scaling->type : "rope"));
  if (mode == "max_context" && at_cap && o.ctx_per_slot < m.max_ctx() && m.rope_scaling)
    w.push_back(fmt::format("stopped at {}'s native {} tokens; longer contexts need --rope-scaling {} --rope-scale {:g}",
                            m.name, m.ctx_native, m.rope_scaling->type, m.rope_scaling->factor));
  if (s.runtime && s.runtime->kind == "mlx" && prior_name(s, o.cache_type_k, true) != "f16")
    w.push_back("mlx_lm.server has no KV quantization flags: this cache runs with mlx_lm.generate or the Python API (kv_bits)");
  serving_warnings(s, c, o, w);
  return w;
}

// What the launch lines state about placement: the request's, or kvplan's choice for this candidate.
Resolved resolved_for(const Setup& s, const Candidate& c, Option& o) {
  set_placement(s, c, o);
  Resolved res = s.resolved;
  if (c.placed_by_kvplan) res.placement = "kvplan";
  res.n_gpu_layers = o.n_gpu_layers;
  res.n_cpu_moe = o.n_cpu_moe;
  return res;
}

// What is said of an option the plan shows: its warnings, reason and launch lines. Only the options that are
// printed get them (the mission sizes ~200 candidates and shows 5).
void dress_option(const Setup& s, const Sized::Origin& origin, const std::string& mode, Option& o) {
  if (!s.own_memory) o.allocations = account(s, *origin.candidate, o.ctx_size).allocations;  // ranked without them
  score(s, *origin.candidate, o, /*with_evidence=*/true);  // the same figures, now with their sentences
  const Resolved res = resolved_for(s, *origin.candidate, o);
  o.warnings = option_warnings(s, *origin.candidate, o, mode, origin.at_cap);
  o.reason = reason_for(s, o);
  o.launches = s.runtime ? engines::runtime_launches(*s.catalog, *s.runtime, *s.model, o, res, s.request.model)
                         : engines::launch_lines(*s.model, o, res, s.engine->default_ubatch, s.engine->default_batch);
  o.launch = o.launches.front().text;
}

std::string duration(double seconds) {
  if (seconds < 90) return fmt::format("{:.0f} s", seconds);
  if (seconds < 5400) return fmt::format("{:.0f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

// Full offload does not fit: how many layers would, with the rest in RAM (-ngl); empty when none.
std::string layers_that_fit(const Setup& s, const Candidate& closest_candidate, const Option& closest) {
  const ModelSpec& m = *s.model;
  const Request& r = s.request;
  if (s.own_memory || r.n_gpu_layers || s.backend->id == "cpu" || s.pools.size() < 2 || short_pool(closest) != 0) return {};
  Setup alt = s;
  Candidate c = closest_candidate;
  auto fits_with = [&](int ngl) {
    alt.placement = Placement::for_request(m, ngl, r.n_cpu_moe, s.engine->rule_holds("ngl_counts_output"));
    alt.placement.split_points = s.placement.split_points;  // the same GPUs, the same split
    c.weight_bytes = std::make_shared<const WeightBytes>(weight_bytes(m, *c.weights, *alt.engine, *alt.backend, alt.placement));
    return account(alt, c, closest.ctx_size).fits();
  };
  if (!fits_with(0)) return {};
  int lo = 0, hi = m.layers + 1;  // lo fits, hi does not (full offload failed)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fits_with(mid) ? lo : hi) = mid;
  }
  const Placement at = Placement::for_request(m, lo, r.n_cpu_moe, s.engine->rule_holds("ngl_counts_output"));
  return fmt::format(". With -ngl {} ({} of {} layers{} on the GPU, the rest in host RAM, much slower) that option fits", lo,
                     m.layers - at.first_gpu_layer, m.layers, at.output_on_gpu ? " and the output layer" : "");
}

// Nothing fits: the closest options, what is missing and what would fit instead.
void report_nothing_fits(const Setup& s, Sized& sized, Plan& out) {
  const Request& r = s.request;
  std::vector<size_t> order = sized.failing;  // into sized.options
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shortfall(sized.options[a]) < shortfall(sized.options[b]); });
  const Option& closest = sized.options[order.front()];
  const Candidate& closest_candidate = *sized.origins[order.front()].candidate;
  const Pool& dev = s.pools[short_pool(closest)];
  out.nothing_fits = fmt::format(
      "on {}, the smallest option ({} weights, {} tokens, K={} V={}) needs {} more than the {} the plan can use. "
      "It would fit {} of {} GiB",
      dev.device, closest.weights, closest.ctx_size, closest.cache_type_k, closest.cache_type_v, format_size(shortfall(closest)),
      format_size(dev.budget()), dev.kind == "host" ? "with host RAM" : "a device", format_gib(dev.capacity + shortfall(closest)));
  // With the context pinned, the same configuration at the longest context that does fit.
  const int shorter = r.ctx_size ? largest_fitting_ctx(s, closest_candidate, *r.ctx_size) : 0;
  out.nothing_fits += shorter > 0 ? fmt::format(", or -c {} with the same weights and cache types", shorter)
                                  : ", or try a smaller model or a shorter context";
  // Offloading layers makes the option fit but not acceptable when it rates avoid: no advice to run it.
  if (closest.quality.risk != Risk::avoid || r.accept_risk) out.nothing_fits += layers_that_fit(s, closest_candidate, closest);
  for (size_t i : order) {
    if (out.options.size() >= static_cast<size_t>(r.top)) break;
    dress_option(s, sized.origins[i], out.mode, sized.options[i]);
    out.options.push_back(std::move(sized.options[i]));
  }
}

// The pruned candidates the explanation compares the recommendation with (explain.cpp): the same weights with
// 4-bit keys (k_line), more precise weights with the same cache (weights_line), and every one when the recommendation
// is short of the target (context_line reads the best option that reaches it). The ranking is theirs already: none of
// them could be shown (cannot_show).
void size_for_explanation(const Setup& s, Sizer& sizer, const Option& best, const Candidate& best_candidate) {
  if (sizer.sized().unsized.empty()) return;
  const double low_bits = s.catalog->prior.low_bits;
  sizer.size_unsized([&](const Sized::Unsized& u) {
    const Candidate& c = *u.candidate;
    if (best.ctx_per_slot < s.target_ctx) return true;
    if (c.weights == best_candidate.weights && k_bits(s, c.k) <= low_bits) return true;
    return c.k == best.cache_type_k && c.v == best.cache_type_v && c.flash_attn == best.flash_attn &&
           c.weights->rel_loss <= best_candidate.weights->rel_loss;
  });
}

// The fitting options ranked (docs/ranking.md §5): below the task minimum dropped when others reach it,
// dominated options dropped, the rest sorted; the first is the recommendation.
// recommendation_only: a suggestion's re-plan, which reads only the recommendation (dressed), not the other options
// shown nor the explanation.
void rank_options(const Setup& s, Sizer& sizer, Plan& out, bool recommendation_only) {
  const Sized& sized = sizer.sized();
  std::vector<const Option*> fitting;
  fitting.reserve(sized.fitting.size());
  for (size_t i : sized.fitting) fitting.push_back(&sized.options[i]);
  if (std::all_of(fitting.begin(), fitting.end(), [](const Option* o) { return o->below_task_min; }))
    out.warnings.push_back(fmt::format("no option reaches the {} task's minimum of {} tokens; the best shorter ones are shown",
                                       s.task->id, s.min_ctx));
  const size_t shown = recommendation_only ? 1 : static_cast<size_t>(s.request.top);
  const std::vector<size_t> kept = ranked(s, fitting, out.mode == "max_context", shown);
  for (size_t i : kept) {
    Option o = *fitting[i];
    dress_option(s, sized.origins[sized.fitting[i]], out.mode, o);
    out.options.push_back(std::move(o));
  }
  if (recommendation_only) return;
  const Candidate& best = *sized.origins[sized.fitting[kept.front()]].candidate;
  size_for_explanation(s, sizer, out.options.front(), best);
  out.explanation = explain(s, out.options.front(), sizer.sized().fitting_in_order());
}

// Honest exits: when even the best option rates "avoid" for the task the plan recommends nothing (exit 1) unless
// the request accepts the risk; speed below the task's floor, or unknown, is said.
void judge(const Setup& s, Plan& out) {
  const Option& best = out.options.front();
  if (best.quality.risk == Risk::avoid) {
    const std::string what = fmt::format("the least bad option ({} weights, {} tokens, K={} V={}) rates avoid for {} (~{} expected loss)",
                                         best.weights, best.ctx_per_slot, best.cache_type_k, best.cache_type_v, s.task->id,
                                         loss_pct(best.quality.expected_loss));
    if (s.request.accept_risk) {
      out.warnings.push_back(what + ": recommended because --accept-risk was given");
    } else {
      out.verdict = "nothing_acceptable";
      out.nothing_acceptable = what + "; --accept-risk takes it anyway";
    }
  }
  const double floor = s.task->decode_floor_tps;
  if (best.decode_tps <= 0 && !s.own_memory)
    out.warnings.push_back(s.resolved.gpu_size_only ? "speed unknown: a bare size names no card's bandwidth, so options are not ranked by speed "
                                                      "(name the card, e.g. --gpu rtx4090)"
                                                    : "speed unknown for this device: options are not ranked by speed");
  else if (best.decode_tps > 0 && best.decode_tps < floor)
    out.warnings.push_back(fmt::format("decode ~{:.1f} tok/s is below the {} task's floor of {:g} tok/s: nothing faster fits that keeps the "
                                       "context and quality; a smaller model or a faster device would", best.decode_tps, s.task->id, floor));
  if (best.ttft_s > 0 && s.task->ttft_max_s > 0 && best.ttft_s > s.task->ttft_max_s)
    out.warnings.push_back(fmt::format("a {}-token prompt takes ~{} to the first token here (the {} task wants under {:g} s): a smaller "
                                       "model, a faster device or shorter prompts", best.ctx_per_slot, duration(best.ttft_s), s.task->id,
                                       s.task->ttft_max_s));
}

}  // namespace
}  // namespace detail

Plan plan(const Catalog& catalog, const Request& request) {
  return detail::plan_sharing(catalog, request, std::make_shared<detail::ComputeMemo>(), false);
}

Plan detail::plan_sharing(const Catalog& catalog, const Request& request, const std::shared_ptr<ComputeMemo>& memo,
                          bool recommendation_only) {
  using namespace detail;
  Setup resolved_setup = resolve(catalog, request);
  resolved_setup.compute_memo = memo;
  const Setup& s = resolved_setup;
  Plan out;
  out.request = request;  // what was asked, as given
  out.resolved = s.resolved;
  out.model = s.model;
  out.task = s.task;
  out.pools = s.pools;
  out.warnings.insert(out.warnings.end(), s.warnings.begin(), s.warnings.end());
  if (!s.backend->verified && !s.own_memory)
    out.warnings.push_back(fmt::format("{} kernel rules are not verified against llama.cpp source; treat feasibility as a guess", s.backend->name));

  out.mode = mode_of(s.request);
  out.target_ctx = s.target_ctx;
  // Targets and model limits are per conversation; -c counts every slot when the KV is not unified.
  const int slots = s.request.kv_unified || s.own_memory ? 1 : s.request.n_parallel;
  // In 64 bits, then capped at 2^30 tokens in all (llama.cpp's n_ctx is 32-bit; 256 slots x 10M tokens overflowed).
  const int cap = static_cast<int>(std::min<long long>(1LL << 30, static_cast<long long>(slots) * (out.mode == "max_context" ? s.ctx_allowed : s.target_ctx)));
  Sizer sizer(s, out.mode, cap, recommendation_only ? 1 : static_cast<size_t>(s.request.top));
  std::vector<Candidate> candidates = enumerate(s, /*with_weights=*/!sizer.prunes());  // the sizer sizes the weights it needs
  const std::vector<int> reached = sizer.size_candidates(candidates);
  // The model does not fit the GPU for the task (nothing mild or better at its minimum): the same candidates with
  // layers or experts in RAM, which the objective weighs against the squeezed ones by their speed.
  if (s.auto_placement && !sizer.sized().good_at_min())
    sizer.size_placed(candidates, reached, s.request.ctx_size ? *s.request.ctx_size : cap);
  if (sizer.sized().fitting.empty()) {
    out.verdict = "nothing_fits";
    if (recommendation_only) return out;  // no recommendation: what is missing is not read
    sizer.size_closest_deferred();
    report_nothing_fits(s, sizer.sized(), out);
  } else {
    rank_options(s, sizer, out, recommendation_only);
    judge(s, out);
  }
  if (s.request.suggest) {
    s.sized_memo.clear();  // every option is sized; the re-plans size a file's own format in their own Setup
    out.suggestions = suggestions_for(s, out);
  }
  return out;
}

}  // namespace kvplan

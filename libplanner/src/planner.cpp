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

// The option's -ngl / --n-cpu-moe: the request's, or kvplan's choice for this candidate.
void set_placement(const Setup& s, const Candidate& c, Option& o) {
  o.n_gpu_layers = s.resolved.n_gpu_layers;
  o.n_cpu_moe = s.resolved.n_cpu_moe;
  if (!c.placed_by_kvplan) return;
  o.n_gpu_layers = c.placement.cpu_moe_layers > 0 ? std::nullopt : std::optional<int>(s.model->layers + 1 - c.placement.first_gpu_layer);
  o.n_cpu_moe = c.placement.cpu_moe_layers > 0 ? std::optional<int>(c.placement.cpu_moe_layers) : std::nullopt;
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

// The options of every candidate, sized, each with where it came from, and split by the fit check (indices). One
// store for all: the mission sizes ~1,200 options of ~0.5 KiB, and two lists reserved for all of them each made the
// allocator return and fault in a megabyte per plan (18 % of a repeated CPU-backend mission, docs/benchmarks.md).
struct Sized {
  struct Origin {
    const Candidate* candidate;
    bool at_cap;
  };
  std::vector<Option> options;
  std::vector<Origin> origins;
  std::vector<size_t> fitting, failing;  // into options
  void reserve(size_t n) {  // the options are large: moved once each, not again as the store grows
    options.reserve(n), origins.reserve(n), fitting.reserve(n), failing.reserve(n);
  }
  void add(Option&& o, int ctx, const Candidate& c, bool at_cap) {
    (o.fits() && ctx > 0 ? fitting : failing).push_back(options.size());
    options.push_back(std::move(o));
    origins.push_back({&c, at_cap});
  }
  // A candidate whose main weights alone overflow a pool fits at no context (weights_alone_overflow): its option is
  // read only when nothing fits (report_nothing_fits), so it is sized then if it can be shown (size_closest_deferred).
  void defer(const Candidate& c) {
    deferred.push_back(options.size());
    failing.push_back(options.size());
    options.emplace_back();
    origins.push_back({&c, false});
  }
  std::vector<size_t> deferred;  // into options: failing, not sized yet
  // an option at the task minimum that rates mild or better: the model fits the GPU for the task
  bool good_at_min() const {
    return std::any_of(fitting.begin(), fitting.end(), [&](size_t i) {
      return !options[i].below_task_min && options[i].quality.risk <= Risk::mild;
    });
  }
};

// Candidates alike in memory fit the same context: one weight format and flash attention setting, the request's
// placement, and cache types of the same size (q4_0 and iq4_nl: compute_type_key with row sizes is everything
// account() reads of a type). Each such class is searched once per plan; kvplan's own placements are searched each.
class ContextSearches {
 public:
  // round: the ranking's round numbers (largest_round_ctx), else to the step
  int largest_fitting(const Setup& s, const Candidate& c, int cap, bool round) {
    auto search = [&] { return round ? largest_round_ctx(s, c, cap) : largest_fitting_ctx(s, c, cap); };
    // another engine's cache types are not ggml types; an offloaded candidate has a placement of its own, and its
    // probes meet no other candidate's (the step search's first probes, the cap and one step, cost less there)
    if (s.own_memory || c.placed_by_kvplan) return largest_fitting_ctx(s, c, cap);
    const auto k = compute_type_key(c.ggml_k(*s.engine), true), v = compute_type_key(c.ggml_v(*s.engine), true);
    const Key key{{c.weights}, {k[0], k[1], k[2], v[0], v[1], v[2], c.flash_attn ? 1 : 0, cap, round ? 1 : 0}};
    auto it = found_.find(key);
    if (it == found_.end()) it = found_.emplace(key, search()).first;
    return it->second;
  }

 private:
  using Key = FlatKey<1, 9>;
  std::unordered_map<Key, int, FlatKeyHash> found_;
};

// One candidate as an option: its context (pinned, or the largest that fits up to the cap), every allocation,
// its quality and speed: what the ranking needs. ctx_found is 0 when nothing fits even at one step; at_cap says
// the search stopped at the cap (dress_option's warnings).
Option size_option(const Setup& s, const Candidate& c, const std::string& mode, int cap, ContextSearches& searches, int& ctx_found,
                   bool& at_cap) {
  const Request& r = s.request;
  const int slots = r.kv_unified || s.own_memory ? 1 : r.n_parallel;
  int ctx = 0;
  if (r.ctx_size) {
    ctx = *r.ctx_size;
  } else {
    ctx = searches.largest_fitting(s, c, cap, mode == "rank");
    // ranked options below the cap use round numbers (multiples of 1024); the inverse query keeps 256
    if (mode == "rank" && ctx < cap && ctx >= 2 * kRoundCtx * slots) ctx = ctx / (kRoundCtx * slots) * (kRoundCtx * slots);
  }
  ctx_found = ctx;
  at_cap = ctx == cap;
  const int at = ctx > 0 ? ctx : static_cast<int>(std::min<long long>(cap, std::max<long long>(kMinCtx, static_cast<long long>(s.min_ctx) * slots)));
  // llama.cpp's options without their allocation list (~200 are sized, 5 shown: dress_option lists them)
  SpeedInputs speed;
  Option o = s.own_memory ? account(s, c, at) : ranked_account(s, c, at, speed);
  score(s, c, o);
  set_placement(s, c, o);  // the launch lines' Resolved is built for the options shown (dress_option)
  if (s.own_memory) estimate_speed(s, c, o);
  else estimate_speed(s, c, o, speed);
  o.score = objective(s, o, mode == "max_context");
  return o;
}

// What sizing the candidates of one plan shares: its mode and context cap, and the context searches' memo.
struct Sizing {
  const std::string& mode;
  int cap;
  ContextSearches searches;
};

// A candidate whose main weights alone overflow a pool fits at no context (weights_alone_overflow): its option is
// read only when nothing fits, so it is sized then (Sized::defer).
bool sized_later(const Setup& s, const Candidate& c) { return !s.own_memory && weights_alone_overflow(s, c); }

// The candidates sized into `sized` in their order; returns the context each reaches (0: it does not fit).
std::vector<int> size_candidates(const Setup& s, const std::vector<Candidate>& cs, Sizing& run, Sized& sized) {
  std::vector<int> reached(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    if (sized_later(s, cs[i])) {
      sized.defer(cs[i]);
      continue;  // reached[i] stays 0
    }
    bool at_cap = false;
    Option o = size_option(s, cs[i], run.mode, run.cap, run.searches, reached[i], at_cap);
    if (!o.fits()) reached[i] = 0;
    sized.add(std::move(o), reached[i], cs[i], at_cap);
  }
  return reached;
}

// The model does not fit the GPU for the task: the candidates that do not reach `at`, with layers or experts in RAM
// (kvplan's placement), kept in `placed` and sized into `sized` in the candidates' order. Worked out cache-type-major
// (each setting's formats one after another: their graphs differ only in the copies' sizes, GraphReuse).
void size_placed(const Setup& s, const std::vector<Candidate>& candidates, const std::vector<int>& reached, int at, Sizing& run,
                 Sized& sized, std::vector<Candidate>& placed) {
  std::vector<std::optional<Candidate>> by_index(candidates.size());
  for (size_t i : settings_major(candidates))
    if (reached[i] < at) by_index[i] = offloaded(s, candidates[i], at);
  for (auto& c : by_index)
    if (c) placed.push_back(std::move(*c));
  struct Result {
    Option option;
    int ctx = 0;
    bool at_cap = false;
  };
  std::vector<std::optional<Result>> results(placed.size());
  for (size_t k : settings_major(placed)) {
    if (sized_later(s, placed[k])) continue;  // deferred below
    Result r;
    r.option = size_option(s, placed[k], run.mode, run.cap, run.searches, r.ctx, r.at_cap);
    results[k] = std::move(r);
  }
  sized.reserve(sized.options.size() + placed.size());
  for (size_t k = 0; k < placed.size(); ++k)
    if (results[k]) sized.add(std::move(results[k]->option), results[k]->ctx, placed[k], results[k]->at_cap);
    else sized.defer(placed[k]);
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

// The pool an option is short in by the most (the GPU, or host RAM under --ram), and by how much.
size_t short_pool(const Option& o) {
  size_t worst = 0;
  for (size_t i = 1; i < o.pools.size(); ++i)
    if (o.pools[i].headroom < o.pools[worst].headroom) worst = i;
  return worst;
}
Bytes shortfall(const Option& o) { return -o.pools[short_pool(o)].headroom; }

// Nothing fits: the deferred candidates sized closest first, by their main weights' shortfall alone (a lower bound of
// the option's: every other allocation adds to it), until that bound exceeds the shortfall of the `top`-th closest
// option sized so far. The rest cannot be among the options report_nothing_fits shows (the closest, ordered stably)
// and leave the failing list unsized: a 235B model on a 12 GB card sized ~200 of them, each a graph at its context.
void size_closest_deferred(const Setup& s, Sizing& run, Sized& sized) {
  const size_t shown = static_cast<size_t>(std::max(1, s.request.top));
  std::vector<std::pair<Bytes, size_t>> by_bound;  // (the weights' shortfall, index into options)
  for (size_t i : sized.deferred) by_bound.emplace_back(-weights_alone_headroom(s, *sized.origins[i].candidate), i);
  std::stable_sort(by_bound.begin(), by_bound.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Bytes> closest;  // the smallest shortfalls of the options sized, ascending, at most `shown`
  auto keep = [&](Bytes shortfall_bytes) {
    closest.insert(std::upper_bound(closest.begin(), closest.end(), shortfall_bytes), shortfall_bytes);
    if (closest.size() > shown) closest.pop_back();
  };
  std::vector<char> unsized(sized.options.size(), 0);
  for (size_t i : sized.deferred) unsized[i] = 1;
  for (size_t i : sized.failing)
    if (!unsized[i]) keep(shortfall(sized.options[i]));
  for (const auto& [bound, i] : by_bound) {
    if (closest.size() == shown && bound > closest.back()) break;  // this one and every later one rank below them
    int ctx = 0;
    sized.options[i] = size_option(s, *sized.origins[i].candidate, run.mode, run.cap, run.searches, ctx, sized.origins[i].at_cap);
    unsized[i] = 0;
    keep(shortfall(sized.options[i]));
  }
  sized.failing.erase(std::remove_if(sized.failing.begin(), sized.failing.end(), [&](size_t i) { return unsized[i] != 0; }),
                      sized.failing.end());
  sized.deferred.clear();
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

// The fitting options ranked (docs/ranking.md §5): below the task minimum dropped when others reach it,
// dominated options dropped, the rest sorted; the first is the recommendation.
// recommendation_only: a suggestion's re-plan, which reads only the recommendation (dressed), not the other options
// shown nor the explanation.
void rank_options(const Setup& s, const Sized& sized, Plan& out, bool recommendation_only) {
  std::vector<const Option*> fitting;
  fitting.reserve(sized.fitting.size());
  for (size_t i : sized.fitting) fitting.push_back(&sized.options[i]);
  const bool max_context = out.mode == "max_context";
  const bool any_at_min = std::any_of(fitting.begin(), fitting.end(), [](const Option* o) { return !o->below_task_min; });
  std::vector<size_t> ranked;  // indices into fitting
  for (size_t i = 0; i < fitting.size(); ++i)
    if (!any_at_min || !fitting[i]->below_task_min) ranked.push_back(i);
  if (!any_at_min)
    out.warnings.push_back(fmt::format("no option reaches the {} task's minimum of {} tokens; the best shorter ones are shown",
                                       s.task->id, s.min_ctx));
  std::vector<Standing> standings;
  standings.reserve(ranked.size());
  for (size_t i : ranked) standings.push_back(standing(s, *fitting[i], max_context));
  std::vector<size_t> kept = undominated(standings);
  for (size_t& k : kept) k = ranked[k];
  std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return ranks_before(s, *fitting[a], *fitting[b]); });
  kept.resize(std::min<size_t>(kept.size(), recommendation_only ? 1 : static_cast<size_t>(s.request.top)));
  for (size_t i : kept) {
    Option o = *fitting[i];
    dress_option(s, sized.origins[sized.fitting[i]], out.mode, o);
    out.options.push_back(std::move(o));
  }
  if (!recommendation_only) out.explanation = explain(s, out.options.front(), fitting);
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

  const std::vector<Candidate> candidates = enumerate(s);
  out.mode = mode_of(s.request);
  out.target_ctx = s.target_ctx;
  // Targets and model limits are per conversation; -c counts every slot when the KV is not unified.
  const int slots = s.request.kv_unified || s.own_memory ? 1 : s.request.n_parallel;
  // In 64 bits, then capped at 2^30 tokens in all (llama.cpp's n_ctx is 32-bit; 256 slots x 10M tokens overflowed).
  const int cap = static_cast<int>(std::min<long long>(1LL << 30, static_cast<long long>(slots) * (out.mode == "max_context" ? s.ctx_allowed : s.target_ctx)));
  Sized sized;
  sized.reserve(candidates.size());
  Sizing run{out.mode, cap, {}};
  const std::vector<int> reached = size_candidates(s, candidates, run, sized);
  // The model does not fit the GPU for the task (nothing mild or better at its minimum): the same candidates with
  // layers or experts in RAM, which the objective weighs against the squeezed ones by their speed.
  std::vector<Candidate> placed;
  if (s.auto_placement && !sized.good_at_min())
    size_placed(s, candidates, reached, s.request.ctx_size ? *s.request.ctx_size : cap, run, sized, placed);
  if (sized.fitting.empty()) {
    out.verdict = "nothing_fits";
    if (recommendation_only) return out;  // no recommendation: what is missing is not read
    size_closest_deferred(s, run, sized);
    report_nothing_fits(s, sized, out);
  } else {
    rank_options(s, sized, out, recommendation_only);
    judge(s, out);
  }
  if (s.request.suggest) {
    s.sized_memo.clear();  // every option is sized; the re-plans size a file's own format in their own Setup
    out.suggestions = suggestions_for(s, out);
  }
  return out;
}

}  // namespace kvplan

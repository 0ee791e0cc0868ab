#include "planner/sizing.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <queue>
#include <stdexcept>
#include <tuple>

namespace kvplan::detail {

void Sized::reserve(size_t n) {  // the options are large: moved once each, not again as the store grows
  options.reserve(n), origins.reserve(n), fitting.reserve(n), failing.reserve(n);
}

void Sized::add(Option&& o, int ctx, const Candidate& c, bool at_cap, size_t ordinal) {
  (o.fits() && ctx > 0 ? fitting : failing).push_back(options.size());
  options.push_back(std::move(o));
  origins.push_back({&c, at_cap, ordinal});
}

void Sized::defer(const Candidate& c, size_t ordinal, std::optional<Bytes> placement_pending) {
  deferred.push_back({options.size(), placement_pending});
  failing.push_back(options.size());
  options.emplace_back();
  origins.push_back({&c, false, ordinal});
}

bool Sized::good_at_min() const {
  return std::any_of(fitting.begin(), fitting.end(), [&](size_t i) {
    return !options[i].below_task_min && options[i].quality.risk <= Risk::mild;
  });
}

std::vector<const Option*> Sized::fitting_in_order() const {
  std::vector<size_t> order = fitting;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return origins[a].ordinal < origins[b].ordinal; });
  std::vector<const Option*> out;
  out.reserve(order.size());
  for (size_t i : order) out.push_back(&options[i]);
  return out;
}

// The option's -ngl / --n-cpu-moe: the request's, or kvplan's choice for this candidate.
void set_placement(const Setup& s, const Candidate& c, Option& o) {
  o.n_gpu_layers = s.resolved.n_gpu_layers;
  o.n_cpu_moe = s.resolved.n_cpu_moe;
  if (!c.placed_by_kvplan) return;
  o.n_gpu_layers = c.placement.cpu_moe_layers > 0 ? std::nullopt : std::optional<int>(s.model->layers + 1 - c.placement.first_gpu_layer);
  o.n_cpu_moe = c.placement.cpu_moe_layers > 0 ? std::optional<int>(c.placement.cpu_moe_layers) : std::nullopt;
}

// The pool an option is short in by the most (the GPU, or host RAM under --ram), and by how much.
size_t short_pool(const Option& o) {
  size_t worst = 0;
  for (size_t i = 1; i < o.pools.size(); ++i)
    if (o.pools[i].headroom < o.pools[worst].headroom) worst = i;
  return worst;
}
Bytes shortfall(const Option& o) { return -o.pools[short_pool(o)].headroom; }

int ContextSearches::largest_fitting(const Setup& s, const Candidate& c, int cap, bool round) {
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

namespace {

// A candidate whose main weights alone overflow a pool fits at no context (weights_alone_overflow): its option is
// read only when nothing fits, so it is sized then (Sized::defer).
bool sized_later(const Setup& s, const Candidate& c) { return !s.own_memory && weights_alone_overflow(s, c); }

// Whether adding option o can change the first `count` of the ranking `shown` (conservatively: yes when unsure).
// It cannot when it ranks after the last shown and dominates none of them: each stays undominated and ahead of it.
bool changes_shown(const Setup& s, const Option& o, const ShownOptions& shown, size_t count) {
  if (shown.options.size() < count || shown.options.back()->below_task_min) return true;
  if (o.below_task_min) return false;  // below the minimum that the last shown reaches: not ranked
  if (ranks_before(s, o, rank_tier(s, o.quality.risk, o.below_task_min, o.cache_type_k), *shown.options.back(), shown.last_tier))
    return true;
  const Standing mine = standing(s, o, false);
  return std::any_of(shown.standings.begin(), shown.standings.end(), [&](const Standing& y) { return dominates(mine, y); });
}

// The first `count` options of the ranking of `fitting` (rank mode).
ShownOptions first_ranked(const Setup& s, const std::vector<const Option*>& fitting, size_t count) {
  std::vector<const Option*> first;
  for (size_t i : ranked(s, fitting, false, count)) first.push_back(fitting[i]);
  return ShownOptions(s, std::move(first), false);
}

double order_key(double score) { return std::isnan(score) ? -HUGE_VAL : score; }

}  // namespace

Sizer::Sizer(const Setup& s, const std::string& mode, int cap, size_t shown)
    : s_(s), mode_(mode), cap_(cap), shown_(std::max<size_t>(1, shown)), prune_(mode == "rank" && bounds_apply(s)) {
  const bool every_layer_on_device = s.device_pool != s.host_pool && s.placement.first_gpu_layer == 0 && s.placement.cpu_moe_layers == 0 &&
                                     s.placement.overrides.empty() && s.placement.split_points.empty();
  device_rate_unknown_ = every_layer_on_device && bandwidth_of(s, s.device_pool) <= 0;
}

// One candidate as an option: its context (pinned, or the largest that fits up to the cap), every allocation,
// its quality and speed: what the ranking needs. ctx_found is 0 when nothing fits even at one step; at_cap says
// the search stopped at the cap (dress_option's warnings).
Option Sizer::size_option(const Candidate& c, int& ctx_found, bool& at_cap) {
  const Request& r = s_.request;
  const int slots = r.kv_unified || s_.own_memory ? 1 : r.n_parallel;
  int ctx = 0;
  if (r.ctx_size) {
    ctx = *r.ctx_size;
  } else {
    ctx = searches_.largest_fitting(s_, c, cap_, mode_ == "rank");
    // ranked options below the cap use round numbers (multiples of 1024); the inverse query keeps 256
    if (mode_ == "rank" && ctx < cap_ && ctx >= 2 * kRoundCtx * slots) ctx = ctx / (kRoundCtx * slots) * (kRoundCtx * slots);
  }
  ctx_found = ctx;
  at_cap = ctx == cap_;
  const int at = ctx > 0 ? ctx : static_cast<int>(std::min<long long>(cap_, std::max<long long>(kMinCtx, static_cast<long long>(s_.min_ctx) * slots)));
  // llama.cpp's options without their allocation list (~200 are sized, 5 shown: dress_option lists them)
  SpeedInputs speed;
  Option o = s_.own_memory ? account(s_, c, at) : ranked_account(s_, c, at, speed);
  score(s_, c, o);
  set_placement(s_, c, o);  // the launch lines' Resolved is built for the options shown (dress_option)
  if (s_.own_memory) estimate_speed(s_, c, o);
  else estimate_speed(s_, c, o, speed);
  o.score = objective(s_, o, mode_ == "max_context");
  return o;
}

RankBound Sizer::bound(const Candidate& c, bool placement_open) {
  // weights not sized yet: any bits per weight, any speed (but none known where the device, which holds every layer
  // at the request's placement, has no bandwidth)
  if (!c.weight_bytes) return rank_bound(s_, c, s_.min_ctx, DecodeBound{HUGE_VAL, 1, false, device_rate_unknown_});
  // the decode bound reads the candidate's weights only: one per format and placement
  auto key = std::make_pair(c.weight_bytes.get(), placement_open);
  auto it = decode_bounds_.find(key);
  if (it == decode_bounds_.end()) it = decode_bounds_.emplace(key, decode_bound(s_, c, placement_open)).first;
  return rank_bound(s_, c, s_.min_ctx, it->second, placement_open ? HUGE_VAL : context_bound(s_, c, cap_));
}

std::optional<Bytes> Sizer::shortfall_bound(const Candidate& c) {
  // it reads the candidate's weights only: one per format
  auto it = shortfall_bounds_.find(c.weight_bytes.get());
  if (it == shortfall_bounds_.end()) it = shortfall_bounds_.emplace(c.weight_bytes.get(), offloaded_shortfall_bound(s_, c)).first;
  return it->second;
}

struct Sizer::Result {
  enum class State { none, sized, deferred, placement_deferred } state = State::none;
  Bytes shortfall_bound = 0;  // placement_deferred: offloaded_shortfall_bound
  const Candidate* candidate = nullptr;  // what was sized: the candidate, or kvplan's placement of it
  // its own allocation: a vector of every candidate's Option (~0.6 KiB each) made the heap grow and shrink at every
  // plan (its top trimmed: 580,000 page faults in a second of CPU-backend missions)
  std::unique_ptr<Option> option;
  int ctx = 0;
  bool at_cap = false;
};

// How many results enter the store: the store is reserved for them only (reserved for every candidate, most of the
// options unsized, its capacity made the heap's top grow and shrink from plan to plan).
size_t Sizer::count_kept(const std::vector<Result>& results) {
  return static_cast<size_t>(std::count_if(results.begin(), results.end(), [](const Result& r) { return r.state != Result::State::none; }));
}

// Sizes the candidates `ids` (size_one(id): the option when it fits, else nullptr; refine(id): its bound tightened,
// true when it was) best bound first, and leaves
// unsized each whose bound cannot be shown against the options ranked first so far, these and the sizer's earlier
// options together (cannot_show); every one left is checked again against the final ranking, and sized if it could
// now be shown, until none is. needs_good_at_min: while no option at the task minimum rates mild or better (kvplan's
// placements would follow), only one whose risk bound is worse than mild is left. Returns the ids left.
template <class SizeOne, class Refine>
std::vector<size_t> Sizer::best_first(const std::vector<size_t>& ids, std::vector<RankBound>& bounds, bool needs_good_at_min,
                                      SizeOne&& size_one, Refine&& refine) {
  std::vector<size_t> order = ids;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bounds[a].tier != bounds[b].tier) return bounds[a].tier < bounds[b].tier;
    return order_key(bounds[a].score) > order_key(bounds[b].score);
  });
  std::vector<const Option*> fitting = sized_.fitting_in_order();
  ShownOptions shown = first_ranked(s_, fitting, shown_);
  bool good = !needs_good_at_min || sized_.good_at_min();
  auto size = [&](size_t id) {
    const Option* o = size_one(id);
    if (!o) return;
    fitting.push_back(o);
    good = good || (!o->below_task_min && o->quality.risk <= Risk::mild);
    if (changes_shown(s_, *o, shown, shown_)) shown = first_ranked(s_, fitting, shown_);
  };
  // (an option that could be the one at the minimum rating mild or better is sized while there is none; a bound
  // without the weights' figures is tightened with them before the candidate is sized)
  auto leaves = [&](size_t id) {
    const bool never_good = bounds[id].risk > static_cast<int>(Risk::mild) || std::get<2>(bounds[id].tier);  // or below the minimum
    return (good || never_good) && shown.options.size() >= shown_ && cannot_show(bounds[id], shown);
  };
  auto can_leave = [&](size_t id) { return leaves(id) || (refine(id) && leaves(id)); };
  std::vector<size_t> left;
  for (size_t id : order)
    if (can_leave(id)) left.push_back(id);
    else size(id);
  for (bool sized_any = true; sized_any;) {  // the ranking changed since some were left: check them again
    sized_any = false;
    std::vector<size_t> still;
    for (size_t id : left)
      if (can_leave(id)) still.push_back(id);
      else size(id), sized_any = true;
    left = std::move(still);
  }
  return left;
}

const Candidate& Sizer::weighed(Candidate& c) {
  if (!c.weight_bytes) c.weight_bytes = candidate_weight_bytes(s_, *c.weights, c.placement);
  return c;
}

std::vector<int> Sizer::size_candidates(std::vector<Candidate>& cs) {
  candidates_ = &cs;
  std::vector<int> reached(cs.size());
  std::vector<Result> results(cs.size());
  std::map<const WeightBytes*, bool> later;  // it reads the main weights only: once per format (cs holds them)
  auto sized_later_once = [&](size_t i) {
    auto it = later.find(weighed(cs[i]).weight_bytes.get());
    if (it == later.end()) it = later.emplace(cs[i].weight_bytes.get(), sized_later(s_, cs[i])).first;
    return it->second;
  };
  auto size_one = [&](size_t i) -> const Option* {
    Result& r = results[i];
    if (sized_later_once(i)) {
      r.state = Result::State::deferred;  // reached[i] stays 0
      return nullptr;
    }
    r.state = Result::State::sized;
    r.option = std::make_unique<Option>(size_option(cs[i], reached[i], r.at_cap));
    if (!r.option->fits()) reached[i] = 0;
    r.ctx = reached[i];
    return reached[i] > 0 ? r.option.get() : nullptr;
  };
  std::vector<size_t> ids(cs.size()), left;
  for (size_t i = 0; i < cs.size(); ++i) ids[i] = i;
  if (!prune_) {
    for (size_t i : ids) size_one(i);
  } else {
    bounds_.assign(cs.size(), RankBound{});
    for (size_t i : ids) bounds_[i] = bound(cs[i], false);
    left = best_first(ids, bounds_, s_.auto_placement, size_one, [&](size_t i) {
      if (cs[i].weight_bytes) return false;
      bounds_[i] = bound(weighed(cs[i]), false);
      return true;
    });
  }
  sized_.reserve(count_kept(results));
  for (size_t i = 0; i < cs.size(); ++i)
    if (results[i].state == Result::State::deferred) sized_.defer(cs[i], i);
    else if (results[i].state == Result::State::sized) sized_.add(std::move(*results[i].option), results[i].ctx, cs[i], results[i].at_cap, i);
  std::sort(left.begin(), left.end());
  // kvplan's placements follow: they read whether each candidate reaches the cap (the search's first probe)
  const bool placements_follow = s_.auto_placement && !sized_.good_at_min();
  for (size_t i : left) {
    sized_.unsized.push_back({&cs[i], false, i, bounds_[i]});
    if (placements_follow) reached[i] = reaches_cap(s_, weighed(cs[i]), cap_);
  }
  return reached;
}

void Sizer::size_placed(std::vector<Candidate>& cs, const std::vector<int>& reached, int at) {
  at_ = at;
  std::vector<Result> results(cs.size());
  auto place = [&](size_t i) {  // kvplan's placement of candidate i (nullopt: none fits)
    if (auto c = offloaded(s_, cs[i], at)) {
      placed_.push_back(std::move(*c));
      results[i].candidate = &placed_.back();
      results[i].state = sized_later(s_, placed_.back()) ? Result::State::deferred : Result::State::sized;
    }
  };
  auto size_placement = [&](size_t i) -> const Option* {
    Result& r = results[i];
    if (r.state != Result::State::sized) return nullptr;
    r.option = std::make_unique<Option>(size_option(*r.candidate, r.ctx, r.at_cap));
    return r.option->fits() && r.ctx > 0 ? r.option.get() : nullptr;
  };
  std::vector<size_t> ids;
  for (size_t i : settings_major(cs)) {
    if (reached[i] >= at) continue;
    weighed(cs[i]);  // the placements read the weights at the request's placement
    // a placement whose weights alone would overflow a pool is searched only if nothing fits (size_closest_deferred)
    if (const auto bound = shortfall_bound(cs[i]); bound && *bound > 0) {
      results[i].state = Result::State::placement_deferred;
      results[i].shortfall_bound = *bound;
      continue;
    }
    ids.push_back(i);
  }
  std::vector<RankBound> bounds_placed(cs.size());
  std::vector<size_t> left;
  if (!prune_) {
    // cache-type-major (each setting's formats one after another: their graphs differ only in the copies' sizes, GraphReuse)
    for (size_t i : ids) place(i);
    for (size_t i : ids) size_placement(i);
  } else {
    for (size_t i : ids) bounds_placed[i] = bound(cs[i], true);
    left = best_first(
        ids, bounds_placed, false,
        [&](size_t i) {
          place(i);
          return size_placement(i);
        },
        [](size_t) { return false; });
  }
  sized_.reserve(sized_.options.size() + count_kept(results));
  std::sort(left.begin(), left.end());
  for (size_t i : left) sized_.unsized.push_back({&cs[i], true, cs.size() + i, bounds_placed[i]});
  for (size_t i = 0; i < cs.size(); ++i)
    if (results[i].state == Result::State::deferred) sized_.defer(*results[i].candidate, cs.size() + i);
    else if (results[i].state == Result::State::placement_deferred) sized_.defer(cs[i], cs.size() + i, results[i].shortfall_bound);
    else if (results[i].state == Result::State::sized)
      sized_.add(std::move(*results[i].option), results[i].ctx, *results[i].candidate, results[i].at_cap, cs.size() + i);
  settle();  // the candidates left at the request's placement, against the ranking with kvplan's placements
}

void Sizer::settle() {
  for (;;) {
    const ShownOptions shown = first_ranked(s_, sized_.fitting_in_order(), shown_);
    bool any = false;
    size_unsized([&](const Sized::Unsized& u) {
      const bool size = shown.options.size() < shown_ || !cannot_show(u.bound, shown);
      any = any || size;
      return size;
    });
    if (!any) return;
  }
}

void Sizer::size_unsized(const std::function<bool(const Sized::Unsized&)>& wanted) {
  std::vector<Sized::Unsized> still, now;
  for (const Sized::Unsized& u : sized_.unsized) (wanted(u) ? now : still).push_back(u);
  sized_.unsized = std::move(still);
  for (const Sized::Unsized& u : now) {
    const size_t n = candidates_->size();
    const Candidate* c = &weighed((*candidates_)[u.placement_open ? u.ordinal - n : u.ordinal]);
    if (u.placement_open) {
      auto placed = offloaded(s_, *c, at_);
      if (!placed) continue;
      placed_.push_back(std::move(*placed));
      c = &placed_.back();
      if (sized_later(s_, *c)) {
        sized_.defer(*c, u.ordinal);
        continue;
      }
    }
    int ctx = 0;
    bool at_cap = false;
    Option o = size_option(*c, ctx, at_cap);
    sized_.add(std::move(o), ctx, *c, at_cap, u.ordinal);
  }
}

// Nothing fits: the deferred candidates sized closest first, by their main weights' shortfall alone (a lower bound of
// the option's: every other allocation adds to it), until that bound exceeds the shortfall of the `top`-th closest
// option sized so far. The rest cannot be among the options report_nothing_fits shows (the closest, ordered stably)
// and leave the failing list unsized: a 235B model on a 12 GB card sized ~200 of them, each a graph at its context.
// A deferred placement not searched yet enters with its lower bound, and when its turn comes is searched and enters
// again with its own (the same order as had every placement been searched first).
void Sizer::size_closest_deferred() {
  Sized& sized = sized_;
  const size_t shown = static_cast<size_t>(std::max(1, s_.request.top));
  using Entry = std::tuple<Bytes, size_t, bool>;  // (the bound, the place in the deferred list, placement pending)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (size_t k = 0; k < sized.deferred.size(); ++k) {
    const Sized::Deferred& d = sized.deferred[k];
    queue.emplace(d.placement_pending ? *d.placement_pending : -weights_alone_headroom(s_, *sized.origins[d.option].candidate), k,
                  d.placement_pending.has_value());
  }
  std::vector<Bytes> closest;  // the smallest shortfalls of the options sized, ascending, at most `shown`
  auto keep = [&](Bytes shortfall_bytes) {
    closest.insert(std::upper_bound(closest.begin(), closest.end(), shortfall_bytes), shortfall_bytes);
    if (closest.size() > shown) closest.pop_back();
  };
  std::vector<char> unsized(sized.options.size(), 0);
  for (const Sized::Deferred& d : sized.deferred) unsized[d.option] = 1;
  for (size_t i : sized.failing)
    if (!unsized[i]) keep(shortfall(sized.options[i]));
  while (!queue.empty()) {
    const auto [bound, k, pending] = queue.top();
    if (closest.size() == shown && bound > closest.back()) break;  // this one and every later one rank below them
    queue.pop();
    const size_t i = sized.deferred[k].option;
    Sized::Origin& origin = sized.origins[i];
    if (pending) {  // kvplan's placement, searched now (none: no option)
      auto placed = offloaded(s_, *origin.candidate, at_);
      if (!placed) continue;
      placed_.push_back(std::move(*placed));
      origin.candidate = &placed_.back();
      if (!weights_alone_overflow(s_, placed_.back()))
        throw std::logic_error("size_closest_deferred: a placement bounded to overflow does not (offloaded_shortfall_bound)");
      queue.emplace(-weights_alone_headroom(s_, placed_.back()), k, false);
      continue;
    }
    int ctx = 0;
    sized.options[i] = size_option(*origin.candidate, ctx, origin.at_cap);
    unsized[i] = 0;
    keep(shortfall(sized.options[i]));
  }
  sized.failing.erase(std::remove_if(sized.failing.begin(), sized.failing.end(), [&](size_t i) { return unsized[i] != 0; }),
                      sized.failing.end());
  sized.deferred.clear();
}

}  // namespace kvplan::detail

// Sizing best bound first (planner/sizing.cpp, planner/bound.cpp; docs/ranking.md §5): every bound holds for the
// options its candidate sizes to, and the plan that leaves candidates unsized shows what sizing all of them shows.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "planner/setup.hpp"
#include "planner/sizing.hpp"

using namespace kvplan;

namespace {

// Every catalog model on devices that place layers in RAM (a 12 GB card), name no bandwidth (a bare size), hold
// everything (unified memory) or little (8 GB), for a relaxed task and a strict one.
std::vector<Request> requests() {
  std::vector<Request> out;
  for (const ModelSpec& m : kvtest::catalog().models)
    for (const char* gpu : {"rtx3060-12gb", "24GB", "m4max-128gb", "8GB"})
      for (const char* task : {"general", "agentic"}) {
        if (std::string(task) == "agentic" && std::string(gpu) == "m4max-128gb") continue;
        Request r;
        r.gpu = gpu, r.model = m.id, r.task = task, r.host_ram = 64LL << 30;
        r.suggest = false;  // the plan itself: its suggestions re-plan other requests
        out.push_back(r);
      }
  return out;
}

struct Unpruned {
  detail::Setup setup;
  std::vector<detail::Candidate> candidates;
  std::unique_ptr<detail::Sizer> sizer;
};

// plan()'s sizing with nothing left unsized (a sizer that shows every option can leave none), kvplan's placements
// sized as plan() sizes them (only where nothing at the task minimum rates mild or better), or always.
std::optional<Unpruned> size_everything(const Request& r, bool always_placed) {
  Unpruned u;
  try {
    u.setup = detail::resolve(kvtest::catalog(), r);
    u.candidates = detail::enumerate(u.setup);
  } catch (const InputError&) {
    return std::nullopt;  // an architecture this engine cannot run
  }
  static const std::string kRank = "rank";
  const int cap = u.setup.target_ctx * r.n_parallel;
  u.sizer = std::make_unique<detail::Sizer>(u.setup, kRank, cap, std::numeric_limits<size_t>::max());
  const std::vector<int> reached = u.sizer->size_candidates(u.candidates);
  if (u.setup.auto_placement && (always_placed || !u.sizer->sized().good_at_min())) u.sizer->size_placed(u.candidates, reached, cap);
  return u;
}

}  // namespace

TEST_CASE("rank bounds: no option a candidate sizes to is above its bound") {
  int checked = 0, placed = 0, bounded_ctx = 0;
  for (const Request& r : requests()) {
    auto u = size_everything(r, /*always_placed=*/true);
    if (!u || !detail::bounds_apply(u->setup)) continue;
    const detail::Setup& s = u->setup;
    const detail::Sized& sized = u->sizer->sized();
    for (size_t i : sized.fitting) {
      const Option& o = sized.options[i];
      if (o.below_task_min) continue;  // the bound is for options at the task minimum or longer
      const size_t ordinal = sized.origins[i].ordinal, n = u->candidates.size();
      const bool open = ordinal >= n;  // kvplan's placement: bounded before the search
      const detail::Candidate& c = u->candidates[open ? ordinal - n : ordinal];
      // at the request's placement, no more context than the GPU's room over the cache's share per token
      const double most = open ? HUGE_VAL : detail::context_bound(s, c, s.target_ctx * r.n_parallel);
      CHECK(o.ctx_per_slot <= most);
      const detail::RankBound b = detail::rank_bound(s, c, s.min_ctx, detail::decode_bound(s, c, open), most);
      // before its weights are sized (enumerate without them): any bits per weight and speed
      detail::Candidate weightless = c;
      weightless.weight_bytes.reset();
      const detail::RankBound w = detail::rank_bound(s, weightless, s.min_ctx, detail::DecodeBound{HUGE_VAL, 1, false});
      CHECK(detail::rank_tier(s, o.quality.risk, o.below_task_min, o.cache_type_k) >= w.tier);
      CHECK(o.score <= w.score);
      CHECK(static_cast<int>(o.quality.risk) >= w.risk);
      CHECK(detail::cautious_loss(o) >= w.loss * (1 - 1e-12));
      CHECK(w.score >= b.score - 1e-12 * std::abs(b.score));  // never tighter than the bound with the weights
      bounded_ctx += most < s.target_ctx;
      CAPTURE(r.model, r.gpu, r.task, o.weights, o.cache_type_k, o.cache_type_v, o.ctx_per_slot, open, o.n_gpu_layers.value_or(-1),
              o.n_cpu_moe.value_or(-1), o.score, b.score, o.decode_tps, b.decode_tps, o.decode_relative, b.decode_relative);
      // (the bound's speed is summed in another order than the option's: a rounding step is allowed)
      constexpr double kUlps = 1e-12;
      CHECK(detail::rank_tier(s, o.quality.risk, o.below_task_min, o.cache_type_k) >= b.tier);
      CHECK(o.score <= b.score + kUlps * std::abs(b.score));
      CHECK(static_cast<int>(o.quality.risk) >= b.risk);
      CHECK(detail::cautious_loss(o) >= b.loss * (1 - kUlps));
      CHECK(o.decode_relative <= b.decode_relative * (1 + kUlps));
      if (o.decode_tps > 0) CHECK(o.decode_tps <= b.decode_tps * (1 + kUlps));
      ++checked;
      placed += open;
    }
  }
  CHECK(checked > 20000);
  CHECK(placed > 3000);  // kvplan's placements are bounded too
  CHECK(bounded_ctx > 500);  // and the context bound is exercised (710 options)
}

TEST_CASE("sizing best bound first: plan() shows what sizing every candidate shows, and explains it alike") {
  int compared = 0, left = 0;
  for (const Request& r : requests()) {
    auto u = size_everything(r, /*always_placed=*/false);
    if (!u) continue;
    const Plan p = plan(kvtest::catalog(), r);
    const detail::Sized& sized = u->sizer->sized();
    CAPTURE(r.model, r.gpu, r.task);
    REQUIRE(sized.fitting.empty() == (p.verdict == "nothing_fits"));
    if (p.verdict == "nothing_fits") continue;
    const std::vector<const Option*> fitting = sized.fitting_in_order();
    const std::vector<size_t> top = detail::ranked(u->setup, fitting, false, static_cast<size_t>(r.top));
    REQUIRE(top.size() == p.options.size());
    for (size_t k = 0; k < top.size(); ++k) {
      const Option &a = *fitting[top[k]], &b = p.options[k];
      CAPTURE(k, a.weights, a.cache_type_k, a.cache_type_v, a.ctx_size, b.weights, b.cache_type_k, b.cache_type_v, b.ctx_size);
      CHECK(a.weights == b.weights);
      CHECK(a.cache_type_k == b.cache_type_k);
      CHECK(a.cache_type_v == b.cache_type_v);
      CHECK(a.flash_attn == b.flash_attn);
      CHECK(a.ctx_size == b.ctx_size);
      CHECK(a.n_gpu_layers == b.n_gpu_layers);
      CHECK(a.n_cpu_moe == b.n_cpu_moe);
      CHECK(a.score == b.score);
    }
    CHECK(detail::explain(u->setup, p.options.front(), fitting) == p.explanation);
    // how many the plan left unsized: the same plan's sizer, rebuilt as plan() builds it
    static const std::string kRank = "rank";
    detail::Sizer pruned(u->setup, kRank, u->setup.target_ctx * r.n_parallel, static_cast<size_t>(r.top));
    const std::vector<int> reached = pruned.size_candidates(u->candidates);
    if (u->setup.auto_placement && !pruned.sized().good_at_min())
      pruned.size_placed(u->candidates, reached, u->setup.target_ctx * r.n_parallel);
    left += static_cast<int>(pruned.sized().unsized.size());
    ++compared;
  }
  CHECK(compared > 300);
  CHECK(left > 30000);  // the shortcut is exercised: most candidates are left unsized
}

TEST_CASE("placement shortfall bound: no placement kvplan's search returns has weights closer to fitting") {
  // offloaded_shortfall_bound lets plan() skip the placement search of a candidate whose weights alone would overflow
  // a pool wherever the search put them; it must never exceed the shortfall of the placement the search returns.
  int checked = 0, positive = 0;
  for (const ModelSpec& m : kvtest::catalog().models)
    for (const char* gpu : {"rtx3060-12gb", "8GB", "24GB"})
      for (const long long ram_gib : {8LL, 32LL, 128LL}) {
        Request r;
        r.gpu = gpu, r.model = m.id, r.host_ram = ram_gib << 30;
        detail::Setup s;
        std::vector<detail::Candidate> candidates;
        try {
          s = detail::resolve(kvtest::catalog(), r);
          candidates = detail::enumerate(s);
        } catch (const InputError&) {
          continue;
        }
        const int at = s.target_ctx;
        for (size_t i = 0; i < candidates.size(); i += 3) {
          const auto bound = detail::offloaded_shortfall_bound(s, candidates[i]);
          if (!bound) continue;
          const auto placed = detail::offloaded(s, candidates[i], at);
          if (!placed) continue;
          CAPTURE(m.id, gpu, ram_gib, candidates[i].weights->id, candidates[i].k, candidates[i].v, *bound,
                  placed->placement.first_gpu_layer, placed->placement.cpu_moe_layers);
          CHECK(*bound <= -detail::weights_alone_headroom(s, *placed));
          ++checked;
          positive += *bound > 0;
        }
      }
  CHECK(checked > 5000);
  CHECK(positive > 1000);  // the shortcut is exercised
}

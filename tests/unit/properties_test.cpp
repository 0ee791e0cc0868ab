#include <cmath>
#include <limits>
// Properties over the catalog × several devices: the planner's promises, not its numbers.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "memory/transformer_graph.hpp"
#include "planner/setup.hpp"
#include "priors/prior.hpp"

using namespace kvplan;

namespace {
// Accounting's requests: one GPU, two GPUs (per-device weights), Apple unified memory, the CPU backend, a draft model.
std::vector<Request> accounting_requests() {
  std::vector<Request> requests(5);
  requests[0].gpu = "rtx4090", requests[0].model = "llama-3.1-8b-instruct";
  requests[1].gpu = "rtx3090", requests[1].extra_gpus = {"rtx3060-12gb"}, requests[1].model = "qwen2.5-coder-32b";
  requests[2].gpu = "m4max-128gb", requests[2].model = "qwen3-30b-a3b";
  requests[3].gpu = "24GB", requests[3].backend = "cpu", requests[3].model = "gemma-3-4b-it";
  requests[4].gpu = "rtx4090", requests[4].model = "qwen2.5-coder-32b", requests[4].model_draft = "qwen2.5-0.5b-instruct";
  return requests;
}

const std::vector<std::string> kDevices = {"8GB", "24GB", "rtx3090", "h100-sxm", "m4max-128gb"};
// Cache types ordered by bits per element (ggml block bytes · 8 / block)
const std::vector<std::string> kByBits = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16"};
}  // namespace

TEST_CASE("more bits never raise the predicted loss; loss never falls as context grows") {
  const auto& c = kvtest::catalog();
  for (const auto& m : c.models) {
    for (const char* task : {"general", "agentic", "reasoning"}) {
      priors::QualityInput in;
      in.model = &m;
      in.weights = &c.weight_format("Q4_K_M");
      in.weights_bpw = 4.9;
      in.task = &c.task(task);
      in.rotation = true;
      for (int ctx : {2048, 8192, 32768, 131072}) {
        double prev = 1e9;
        for (const auto& t : kByBits) {  // K and V together, then each alone
          in.type_k = in.type_v = t;
          in.ctx = ctx;
          const double l = priors::assess(c.prior, in).expected_loss;
          INFO(m.id << " " << task << " ctx " << ctx << " " << t);
          CHECK(l <= prev);
          prev = l;
        }
        for (const auto& k : kByBits) {
          in.type_k = k;
          in.type_v = "q8_0";
          in.ctx = ctx;
          const double l1 = priors::assess(c.prior, in).expected_loss;
          in.ctx = ctx * 2;
          const double l2 = priors::assess(c.prior, in).expected_loss;
          INFO(m.id << " " << task << " K " << k << " ctx " << ctx);
          CHECK(l2 >= l1);
        }
      }
    }
  }
}

TEST_CASE("ranked options: all fit, none is dominated by one ranked below it", "[slow]") {
  const auto& c = kvtest::catalog();
  for (size_t i = 0; i < c.models.size(); i += 3) {
    if (!kvtest::engine().arch(c.models[i].arch)) continue;  // refused architecture (catalog_test.cpp)
    for (const auto& dev : kDevices) {
      Request r;
      r.model = c.models[i].id;
      r.gpu = dev;
      r.task = (i / 3) % 2 ? "agentic" : "general";
      r.top = 50;
      const Plan p = plan(c, r);
      if (!p.fits()) continue;
      const int target = std::min(p.task->ctx_target, p.model->ctx_native);
      // docs/ranking.md §5: the loss the objective counts is the cautious one, sqrt(expected x 80 % upper bound)
      auto loss = [](const Option& o) {
        return o.quality.high > o.quality.expected_loss ? std::sqrt(o.quality.expected_loss * o.quality.high) : o.quality.expected_loss;
      };
      auto speed = [](const Option& o) { return o.decode_tps > 0 ? o.decode_tps : o.decode_relative; };
      for (size_t a = 0; a < p.options.size(); ++a) {
        INFO(r.model << " on " << dev << " option " << a + 1);
        CHECK(p.options[a].fits());
        for (size_t b = a + 1; b < p.options.size(); ++b) {
          const Option& hi = p.options[a];
          const Option& lo = p.options[b];
          const int chi = std::min(hi.ctx_per_slot, target), clo = std::min(lo.ctx_per_slot, target);
          // tiers come first (docs/ranking.md §5): an option rated avoid never outranks one that is not, and with K free
          // keys at the prior's low_bits come after higher ones (q5_1 K before q4_0 K even where q4_0's band is narrower)
          const double low = c.prior.low_bits;
          const bool same_tier = (lo.quality.risk == Risk::avoid) == (hi.quality.risk == Risk::avoid) &&
                                 (c.prior.type(lo.cache_type_k).k_bits <= low) == (c.prior.type(hi.cache_type_k).k_bits <= low);
          const bool dominated = same_tier && clo >= chi && loss(lo) <= loss(hi) && lo.pools.front().headroom >= hi.pools.front().headroom &&
                                 speed(lo) >= speed(hi) &&
                                 (clo > chi || loss(lo) < loss(hi) || lo.pools.front().headroom > hi.pools.front().headroom ||
                                  speed(lo) > speed(hi));
          CHECK_FALSE(dominated);
        }
      }
    }
  }
}

TEST_CASE("inverse query: the largest context c fits and c + 256 does not", "[slow]") {
  const auto& c = kvtest::catalog();
  for (size_t i = 0; i < c.models.size(); i += 4) {
    for (const auto& dev : kDevices) {
      for (const char* t : {"q8_0", "f16"}) {
        Request r;
        r.model = c.models[i].id;
        r.gpu = dev;
        r.weights = "Q4_K_M";
        r.cache_type_k = r.cache_type_v = t;
        r.flash_attn = "on";
        r.n_gpu_layers = -1;  // the inverse query of one placement: every layer on the GPU
        Plan p;
        try {
          p = plan(c, r);
        } catch (const InputError&) {
          continue;  // the engine refuses this pair for this model and backend: a valid answer
        }
        if (!p.fits()) continue;
        const int ctx = p.options.front().ctx_size;
        INFO(r.model << " on " << dev << " " << t << " -> " << ctx);
        r.ctx_size = ctx;
        CHECK(plan(c, r).fits());
        if (ctx < c.models[i].ctx_native) {  // at the native maximum the query stops without rope flags
          r.ctx_size = ctx + 256;
          CHECK_FALSE(plan(c, r).fits());
        }
      }
    }
  }
}

TEST_CASE("the default CUDA build is never recommended a mixed pair", "[slow]") {
  const auto& c = kvtest::catalog();
  for (const auto& m : c.models) {
    if (!kvtest::engine().arch(m.arch)) continue;  // listed so its name gives the refusal (catalog_test.cpp)
    for (const char* dev : {"24GB", "rtx4090", "12GB"}) {
      Request r;
      r.model = m.id;
      r.gpu = dev;
      r.task = "agentic";
      const Plan p = plan(c, r);
      if (!p.recommended()) continue;
      INFO(m.id << " on " << dev);
      if (p.recommended()->flash_attn) CHECK(p.recommended()->cache_type_k == p.recommended()->cache_type_v);
    }
  }
}

TEST_CASE("undominated: the kept set equals the check of every option against every other") {
  // Random standings on a coarse grid (ties are common), with speed known for all, none or some of the options, and
  // now and then a loss that is not a number.
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  auto next = [&](int n) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<int>(state % static_cast<std::uint64_t>(n));
  };
  for (int round = 0; round < 300; ++round) {
    const int speeds = round % 3;  // 0: none known, 1: all known, 2: some known
    std::vector<detail::Standing> st(static_cast<size_t>(1 + next(40)));
    for (auto& x : st) {
      x.risk = next(3), x.ctx = 1024 * (1 + next(4)), x.loss = 0.01 * next(5), x.headroom = next(4) * (1LL << 28);
      x.decode_relative = 0.25 * next(4);
      x.decode_tps = speeds == 1 || (speeds == 2 && next(2) == 0) ? 10.0 * (1 + next(3)) : 0;
    }
    if (round % 10 == 9) st[static_cast<size_t>(next(static_cast<int>(st.size())))].loss = std::nan("");  // not a number
    std::vector<size_t> brute;
    for (size_t j = 0; j < st.size(); ++j)
      if (std::none_of(st.begin(), st.end(), [&](const detail::Standing& b) { return detail::dominates(b, st[j]); })) brute.push_back(j);
    CAPTURE(round, st.size(), speeds);
    CHECK(detail::undominated(st) == brute);
  }
}

TEST_CASE("account: the allocations other than the weights, shared by the weight formats, equal each candidate's own") {
  // Every candidate is accounted in one Setup, whose memo the first format of each (K, V, flash attention, context)
  // fills, and again in a fresh Setup, where nothing is shared: the allocations, pools and headroom must agree.
  // Requests: one GPU, two GPUs (per-device weights), Apple unified memory, the CPU backend, a draft model.
  const Catalog& c = kvtest::catalog();
  const std::vector<Request> requests = accounting_requests();
  int compared = 0;
  for (const Request& r : requests) {
    const detail::Setup shared = detail::resolve(c, r);
    const std::vector<detail::Candidate> candidates = detail::enumerate(shared);
    for (const int ctx : {4096, 32768}) {
      for (size_t i = 0; i < candidates.size(); i += 3) {  // every third: several formats per setting
        const detail::Candidate& cand = candidates[i];
        const Option a = detail::account(shared, cand, ctx);
        const Bytes ha = detail::devices_headroom(shared, cand, ctx);
        const detail::Setup fresh = detail::resolve(c, r);
        const Option b = detail::account(fresh, cand, ctx);
        CAPTURE(r.model, r.gpu, ctx, cand.weights->id, cand.k, cand.v, cand.flash_attn);
        REQUIRE(a.allocations.size() == b.allocations.size());
        for (size_t k = 0; k < a.allocations.size(); ++k) {
          const Allocation &x = a.allocations[k], &y = b.allocations[k];
          CHECK((x.component == y.component && x.what == y.what && x.pool == y.pool && x.figure.bytes == y.figure.bytes &&
                 x.figure.high == y.figure.high && x.figure.unpadded == y.figure.unpadded));
        }
        REQUIRE(a.pools.size() == b.pools.size());
        for (size_t k = 0; k < a.pools.size(); ++k) CHECK(a.pools[k].headroom == b.pools[k].headroom);
        CHECK(ha == detail::devices_headroom(fresh, cand, ctx));
        ++compared;
      }
    }
    CHECK(shared.rest_memo.size() + shared.rest_allocations_memo.size() > 0);  // the shared path was taken
  }
  CHECK(compared > 100);
}

TEST_CASE("ranked_account: the pools and speed of an option without its allocation list equal account()'s") {
  // size_option ranks ~200 options without listing their allocations; the options shown are listed by account().
  // Both must give the same pools and the same speed. Requests: one GPU, two GPUs, Apple unified memory, the CPU
  // backend, a draft model (its weights_host beside the main model's), and layers or experts in RAM (kvplan's
  // placements: their rest is shared by placements with the same KV split and host copies, placed_rest_key).
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests = accounting_requests();
  requests.resize(7);
  requests[5].gpu = "rtx3060-12gb", requests[5].model = "qwen3-30b-a3b", requests[5].model_draft = "qwen3-0.6b";
  requests[6].gpu = "6GB", requests[6].model = "qwen2.5-14b-instruct";  // dense: -ngl, the KV of layers in RAM
  int compared = 0, in_ram = 0;
  for (const Request& r : requests) {
    const detail::Setup s = detail::resolve(c, r);
    std::vector<detail::Candidate> candidates = detail::enumerate(s);
    const size_t n = candidates.size();
    for (size_t i = 0; s.auto_placement && i < n; i += 5)  // as plan() places them
      if (auto placed = detail::offloaded(s, candidates[i], 16384)) candidates.push_back(*placed);
    for (const int ctx : {4096, 16384, 32768}) {  // 16384: where the placement search probed
      for (size_t i = 0; i < candidates.size(); i += 3) {
        const detail::Candidate& cand = candidates[i];
        Option a = detail::account(s, cand, ctx);
        const detail::SpeedInputs from_list = detail::speed_inputs(s, cand, a);
        detail::SpeedInputs summed;
        Option b = detail::ranked_account(s, cand, ctx, summed);
        CAPTURE(r.model, r.gpu, ctx, cand.weights->id, cand.k, cand.v, cand.flash_attn, cand.placement.first_gpu_layer);
        CHECK(b.allocations.empty());
        REQUIRE(a.pools.size() == b.pools.size());
        for (size_t k = 0; k < a.pools.size(); ++k) {
          const PoolUsage &x = a.pools[k], &y = b.pools[k];
          CHECK((x.pool == y.pool && x.allocations == y.allocations && x.allocations_high == y.allocations_high && x.total == y.total &&
                 x.total_high == y.total_high && x.headroom == y.headroom));
        }
        REQUIRE(from_list.pools.size() == summed.pools.size());
        for (size_t k = 0; k < summed.pools.size(); ++k) {
          CHECK(from_list.pools[k].weights == summed.pools[k].weights);
          CHECK(from_list.pools[k].weights_in_ram == summed.pools[k].weights_in_ram);
          CHECK(from_list.pools[k].kv == summed.pools[k].kv);
          in_ram += summed.pools[k].weights_in_ram > 0;
        }
        CHECK(from_list.main_weights == summed.main_weights);
        CHECK(from_list.main_weights_on_devices == summed.main_weights_on_devices);
        detail::estimate_speed(s, cand, a);
        detail::estimate_speed(s, cand, b, summed);
        CHECK((a.decode_tps == b.decode_tps && a.decode_tps_low == b.decode_tps_low && a.prefill_tps == b.prefill_tps &&
               a.ttft_s == b.ttft_s && a.decode_relative == b.decode_relative && a.decode_bound == b.decode_bound));
        ++compared;
      }
    }
  }
  CHECK(compared > 200);
  CHECK(in_ram > 10);  // weights read from RAM were compared (the token_embd rows taken off)
}

TEST_CASE("GraphReuse: a graph used again with another format's host copies equals the graph built for them") {
  // The placement search asks each weight format for the same graph but for the sizes of the host matrices the GPU
  // copies; compute_bytes with a GraphReuse resizes a kept graph's copies. Every placed candidate's figures, asked in
  // the planner's order (formats of a cache-type setting one after another), must equal a graph built afresh.
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests(4);
  requests[0].gpu = "rtx3060-12gb", requests[0].model = "qwen3-30b-a3b";  // experts in RAM
  requests[1].gpu = "6GB", requests[1].model = "qwen3-14b";               // layers in RAM (-ngl)
  requests[2].gpu = "8GB", requests[2].model = "gemma-3-12b-it";          // sliding-window layers in RAM
  requests[3].gpu = "4GB", requests[3].model = "phi-4";                   // fused projections: copies no matmul names
  int compared = 0, copies = 0;
  for (const Request& r : requests) {
    const detail::Setup s = detail::resolve(c, r);
    const std::vector<detail::Candidate> candidates = detail::enumerate(s);
    GraphReuse reuse;
    for (size_t i : detail::settings_major(candidates)) {  // as plan() asks them
      const auto placed = detail::offloaded(s, candidates[i], 8192);
      if (!placed || placed->weight_bytes->host_weights.empty()) continue;
      const ModelSpec& m = *s.model;
      const GgmlType& tk = placed->ggml_k(*s.engine);
      const GgmlType& tv = placed->ggml_v(*s.engine);
      for (const int ctx : {4096, 8192}) {
        const auto shape = context_shape(m, *s.engine, ctx, 1, false, 512, 2048, false, placed->flash_attn);
        const HostResident host{&placed->weight_bytes->host_weights, placed->placement.first_gpu_layer > 0 ? m.layers : 0};
        const ComputeBytes fresh = compute_bytes(layer_caches(m, *s.engine), m, *s.engine, shape, tk, tv, placed->flash_attn,
                                                 *s.backend, true, 1, host);
        const ComputeBytes reused = compute_bytes(layer_caches(m, *s.engine), m, *s.engine, shape, tk, tv, placed->flash_attn,
                                                  *s.backend, true, 1, host, nullptr, &reuse);
        CAPTURE(r.model, r.gpu, ctx, placed->weights->id, placed->k, placed->v, placed->flash_attn, placed->placement.first_gpu_layer,
                placed->placement.cpu_moe_layers);
        CHECK(fresh.from_graph == reused.from_graph);
        CHECK((fresh.device.bytes == reused.device.bytes && fresh.device.high == reused.device.high &&
               fresh.host.bytes == reused.host.bytes && fresh.host.high == reused.host.high));
        ++compared, copies += fresh.from_graph;
      }
    }
  }
  CHECK(compared > 40);
  CHECK(copies > 40);  // graphs with host copies were compared, not closed forms
}

TEST_CASE("largest_round_ctx: the ranking's round context equals the step search's answer, rounded") {
  // size_option's rounding of largest_fitting_ctx: below the cap, multiples of 1024 per slot from 2048 per slot on.
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests(5);
  requests[0].gpu = "rtx4090", requests[0].model = "qwen2.5-coder-32b";
  requests[1].gpu = "rtx3060-12gb", requests[1].model = "llama-3.1-8b-instruct", requests[1].n_parallel = 4;
  requests[2].gpu = "8GB", requests[2].model = "gemma-3-12b-it";
  requests[3].gpu = "m4max-128gb", requests[3].model = "qwen3-30b-a3b", requests[3].n_parallel = 3;
  requests[4].gpu = "6GB", requests[4].model = "qwen2.5-7b-instruct", requests[4].backend = "vulkan";
  int compared = 0, below_cap = 0;
  for (const Request& r : requests) {
    const detail::Setup s = detail::resolve(c, r);
    const int slots = r.n_parallel;
    const std::vector<detail::Candidate> candidates = detail::enumerate(s);
    for (const int cap : {3 * 1024 * slots + 512, 8192 * slots, 32768 * slots, 131072 * slots, 1000 * slots}) {
      for (size_t i = 0; i < candidates.size(); i += 4) {
        const int exact = detail::largest_fitting_ctx(s, candidates[i], cap);
        const int rounded = exact < cap && exact >= 2048 * slots ? exact / (1024 * slots) * (1024 * slots) : exact;
        CAPTURE(r.model, r.gpu, slots, cap, candidates[i].weights->id, candidates[i].k, candidates[i].v, exact);
        CHECK(detail::largest_round_ctx(s, candidates[i], cap) == rounded);
        ++compared, below_cap += exact < cap && exact > 0;
      }
    }
  }
  CHECK(compared > 200);
  CHECK(below_cap > 50);  // the search below the cap is exercised, not only the first probe
}

TEST_CASE("context search: a candidate answered 0 fits at no context, and no allocation is negative") {
  // The searches answer 0 without probing where the main weights alone overflow a pool (weights_alone_overflow),
  // which holds only if every other allocation adds bytes: the smallest step must then not fit either.
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests(4);
  requests[0].gpu = "rtx4090", requests[0].model = "qwen3-14b";  // F16 and BF16 exceed the card
  requests[1].gpu = "rtx3060-12gb", requests[1].model = "qwen2.5-coder-32b", requests[1].n_gpu_layers = -1;
  requests[2].gpu = "8GB", requests[2].model = "gemma-3-12b-it", requests[2].n_parallel = 2;
  requests[3].gpu = "rtx3060-12gb", requests[3].model = "qwen3-30b-a3b", requests[3].host_ram = 16LL << 30, requests[3].n_cpu_moe = 48;
  int none = 0, some = 0;
  for (const Request& r : requests) {
    const detail::Setup s = detail::resolve(c, r);
    const int step = s.engine->ctx_pad * r.n_parallel;
    for (const detail::Candidate& cand : detail::enumerate(s)) {
      CAPTURE(r.model, r.gpu, cand.weights->id, cand.k, cand.v, cand.flash_attn);
      const Option smallest = detail::account(s, cand, step);
      for (const Allocation& a : smallest.allocations) {
        CHECK(a.figure.bytes >= 0);
        CHECK(a.figure.high >= 0);
      }
      const int found = detail::largest_fitting_ctx(s, cand, 32768 * r.n_parallel);
      CHECK(detail::largest_round_ctx(s, cand, 32768 * r.n_parallel) == (found >= 2048 * r.n_parallel ? found / 1024 / r.n_parallel * 1024 * r.n_parallel : found));
      if (found == 0) {
        ++none;
        CHECK_FALSE(smallest.fits());
      } else {
        ++some;
        CHECK(smallest.fits());
      }
    }
  }
  CHECK(none > 20);  // formats too large for the card: the shortcut is exercised
  CHECK(some > 20);
}

TEST_CASE("no allocation is negative: every catalog model, layers in RAM, a draft, several backends") {
  // What weights_alone_overflow rests on, over the catalog: each figure of every kind adds bytes to its pool.
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests = accounting_requests();
  for (const ModelSpec& m : c.models) {
    Request r;
    r.gpu = "rtx3060-12gb", r.model = m.id, r.n_gpu_layers = m.layers / 2;  // weights, KV and compute on both sides
    requests.push_back(r);
  }
  int figures = 0;
  for (const Request& r : requests) {
    detail::Setup s;
    std::vector<detail::Candidate> candidates;
    try {
      s = detail::resolve(c, r);
      candidates = detail::enumerate(s);
    } catch (const InputError&) {
      continue;  // an architecture this engine cannot run
    }
    for (size_t i = 0; i < candidates.size(); i += 9) {
      for (const int ctx : {256, 8192}) {
        CAPTURE(r.model, r.gpu, candidates[i].weights->id, candidates[i].k, candidates[i].v, ctx);
        for (const Allocation& a : detail::account(s, candidates[i], ctx).allocations) {
          CAPTURE(a.component, a.what, a.pool);
          CHECK(a.figure.bytes >= 0);
          CHECK(a.figure.high >= a.figure.bytes);
          ++figures;
        }
      }
    }
  }
  CHECK(figures > 5000);
}

TEST_CASE("nothing fits: the options shown are the closest, whichever candidates the plan left unsized") {
  // plan() sizes a candidate whose weights alone overflow a pool only while it could still be among the closest
  // (size_closest_deferred): every candidate at the task's context, sized here in full, is shown or no closer.
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests(3);
  requests[0].gpu = "8GB", requests[0].model = "llama-3.1-70b-instruct", requests[0].host_ram = 8LL << 30;
  requests[1].gpu = "rtx3060-12gb", requests[1].model = "qwen3-235b-a22b", requests[1].host_ram = 16LL << 30;
  requests[2].gpu = "6GB", requests[2].model = "gemma-3-27b-it", requests[2].host_ram = 4LL << 30, requests[2].top = 3;
  auto shortfall = [](const Option& o) {
    Bytes worst = std::numeric_limits<Bytes>::min();
    for (const PoolUsage& u : o.pools) worst = std::max(worst, -u.headroom);
    return worst;
  };
  int compared = 0;
  for (Request r : requests) {
    r.suggest = false;
    const Plan p = plan(c, r);
    CAPTURE(r.model, r.gpu);
    REQUIRE(p.verdict == "nothing_fits");
    REQUIRE(p.options.size() == static_cast<size_t>(r.top));
    Bytes farthest_shown = std::numeric_limits<Bytes>::min();
    for (const Option& o : p.options) farthest_shown = std::max(farthest_shown, shortfall(o));
    const detail::Setup s = detail::resolve(c, r);
    const int at = std::min(p.target_ctx, std::max(256, s.min_ctx));
    auto check = [&](const detail::Candidate& cand, std::optional<int> ngl, std::optional<int> cpu_moe) {
      const Option o = detail::account(s, cand, at);
      CAPTURE(cand.weights->id, cand.k, cand.v, cand.flash_attn, ngl.value_or(-1), cpu_moe.value_or(-1), shortfall(o), farthest_shown);
      const bool shown = std::any_of(p.options.begin(), p.options.end(), [&](const Option& x) {
        return x.n_gpu_layers == ngl && x.n_cpu_moe == cpu_moe && x.weights == o.weights && x.cache_type_k == o.cache_type_k &&
               x.cache_type_v == o.cache_type_v && x.flash_attn == o.flash_attn && x.ctx_size == at;
      });
      CHECK((shown || shortfall(o) >= farthest_shown));
      ++compared;
    };
    const ModelSpec& m = *s.model;
    for (const detail::Candidate& cand : detail::enumerate(s)) {
      check(cand, std::nullopt, std::nullopt);
      // kvplan's placement of it (plan() searches one for each candidate short of the task's context)
      if (const auto placed = detail::offloaded(s, cand, p.target_ctx)) {
        const Placement& pl = placed->placement;
        check(*placed, pl.cpu_moe_layers > 0 ? std::nullopt : std::optional<int>(m.layers + 1 - pl.first_gpu_layer),
              pl.cpu_moe_layers > 0 ? std::optional<int>(pl.cpu_moe_layers) : std::nullopt);
      }
    }
  }
  CHECK(compared > 100);
}

TEST_CASE("offloaded: the most layers on the GPU, as a scan of every -ngl finds them") {
  // Dense models too large for the card at the cap: the placement search (from -ngl 1, a linear guess and a
  // bisection) against every -ngl from the most down, for a few candidates of each request.
  const Catalog& c = kvtest::catalog();
  std::vector<Request> requests(3);
  requests[0].gpu = "rtx3060-12gb", requests[0].model = "gemma-3-27b-it";
  requests[1].gpu = "8GB", requests[1].model = "qwen2.5-coder-32b";
  requests[2].gpu = "6GB", requests[2].model = "llama-3.1-8b-instruct", requests[2].backend = "vulkan";
  int compared = 0, partial = 0;
  for (const Request& r : requests) {
    const detail::Setup s = detail::resolve(c, r);
    const std::vector<detail::Candidate> candidates = detail::enumerate(s);
    const ModelSpec& m = *s.model;
    const bool counts_output = s.engine->rule_holds("ngl_counts_output");
    for (size_t i = 0; i < candidates.size(); i += candidates.size() / 5 + 1) {
      const detail::Candidate& cand = candidates[i];
      for (const int ctx : {4096, 32768}) {
        auto fits = [&](int ngl) {
          detail::Candidate x = cand;
          x.placement = Placement::for_request(m, ngl, std::nullopt, counts_output);
          x.weight_bytes = detail::candidate_weight_bytes(s, *cand.weights, x.placement);
          x.placed_by_kvplan = true;
          return detail::devices_headroom(s, x, ctx) >= 0;
        };
        int scan = m.layers;  // the most that fits; -1: none
        while (scan >= 0 && !fits(scan)) --scan;
        const std::optional<detail::Candidate> found = detail::offloaded(s, cand, ctx);
        CAPTURE(r.model, r.gpu, ctx, cand.weights->id, cand.k, cand.v, cand.flash_attn, scan);
        REQUIRE(found.has_value() == (scan >= 0));
        if (found) CHECK(found->placement.first_gpu_layer == Placement::for_request(m, scan, std::nullopt, counts_output).first_gpu_layer);
        ++compared, partial += scan > 0 && scan < m.layers;
      }
    }
  }
  CHECK(compared >= 20);
  CHECK(partial >= 10);
}

TEST_CASE("least_weight_bytes is a lower bound: a model whose weights exceed every pool together fits no option") {
  // What lets what-fits skip a model and a suggestion skip its re-plan: every fitting option holds at least these
  // weights, and where they exceed the device and host RAM together, nothing is recommended.
  const Catalog& c = kvtest::catalog();
  int exceeded = 0, fitting = 0;
  for (const ModelSpec& m : c.models) {
    Request r;
    r.gpu = "rtx4090", r.model = m.id, r.host_ram = 32LL << 30, r.suggest = false;
    Plan p;
    Bytes room = 0;
    try {
      room = detail::room_for_weights(detail::resolve(c, r));
      p = plan(c, r);
    } catch (const InputError&) {
      continue;  // an architecture this engine cannot run
    }
    const double least = detail::least_weight_bytes(c, m);
    CAPTURE(m.id, least, room);
    REQUIRE(room > 0);
    if (least > static_cast<double>(room)) {
      ++exceeded;
      CHECK_FALSE(p.recommended());
    }
    for (const Option& o : p.options)
      if (o.fits()) {
        ++fitting;
        CHECK(static_cast<double>(o.sum("weights")) + static_cast<double>(o.sum("weights_host")) >= least);
      }
  }
  CHECK(exceeded >= 5);
  CHECK(fitting >= 100);
}

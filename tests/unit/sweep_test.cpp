// The decision sweep (docs/ranking.md §5-6): over the catalog's models, several devices and tasks, what a user acts
// on holds — no "avoid" is recommended, every suggestion re-plans to the option it names, and a max-context answer is
// the largest context that fits with flash attention on or off (a brute-force check by single-configuration plans).
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "kvplan/error.hpp"
#include "kvplan/plan.hpp"

using namespace kvplan;

namespace {
const char* const kSweepGpus[] = {"8GB", "rtx3060-12gb", "rtx4090", "m4max-128gb"};
const char* const kSweepTasks[] = {"general", "agentic", "coding", "rag", "chat", "summarization", "creative", "reasoning"};
}  // namespace

TEST_CASE("decision sweep: no avoid recommended, every suggestion re-plans to its option", "[slow]") {
  const auto& c = kvtest::catalog();
  int plans = 0, suggestions = 0;
  for (size_t i = 0; i < c.models.size(); ++i) {
    for (size_t g = 0; g < std::size(kSweepGpus); ++g) {
      Request r;
      r.model = c.models[i].id;
      r.gpu = kSweepGpus[g];
      r.task = kSweepTasks[(i + g) % std::size(kSweepTasks)];  // every task over the sweep, two per model
      r.host_ram = 64LL << 30;
      Plan p;
      try {
        p = plan(c, r);
      } catch (const InputError&) {
        continue;  // e.g. an architecture the engine does not model: refused with a reason, not planned
      }
      ++plans;
      INFO(r.model << " on " << r.gpu << " for " << r.task << ": " << p.verdict);
      CHECK((p.recommended() != nullptr) == (p.verdict == "ok"));
      if (p.recommended()) CHECK(p.recommended()->quality.risk != Risk::avoid);
      for (const auto& s : p.suggestions) {
        ++suggestions;
        INFO(s.summary);
        REQUIRE_FALSE(s.args.empty());
        CHECK(s.args.front() == "--gpu");
        const Plan again = plan(c, s.request);
        REQUIRE(again.recommended());
        CHECK(again.recommended()->quality.risk != Risk::avoid);
        CHECK(again.recommended()->weights == s.option.weights);
        CHECK(again.recommended()->ctx_size == s.option.ctx_size);
        CHECK(again.recommended()->cache_type_k == s.option.cache_type_k);
        CHECK(again.recommended()->cache_type_v == s.option.cache_type_v);
      }
    }
  }
  CHECK(plans > 200);
  CHECK(suggestions > 10);  // the sweep reaches plans that recommend nothing
}

TEST_CASE("decision sweep: max-context answers equal a brute-force search over flash attention", "[slow]") {
  const auto& c = kvtest::catalog();
  for (size_t i = 0; i < c.models.size(); i += 3) {
    for (const char* gpu : {"rtx3060-12gb", "rtx4090"}) {
      Request r;
      r.model = c.models[i].id;
      r.gpu = gpu;
      r.weights = "Q4_K_M";
      r.cache_type_k = r.cache_type_v = "f16";
      r.n_gpu_layers = -1;  // one placement: every layer on the GPU
      Plan p;
      try {
        p = plan(c, r);
      } catch (const InputError&) {
        continue;
      }
      if (!p.recommended()) continue;
      const Option& best = *p.recommended();
      INFO(r.model << " on " << gpu << " -> " << best.ctx_size << (best.flash_attn ? " FA on" : " FA off"));
      // brute force: the largest multiple of 256 that fits, flash attention on or off, by bisection (fit is monotone)
      int brute = 0;
      for (const char* fa : {"on", "off"}) {
        Request at = r;
        at.flash_attn = fa;
        auto fits = [&](int steps) {
          at.ctx_size = steps * 256;
          try {
            return plan(c, at).fits();
          } catch (const InputError&) {
            return false;  // e.g. FA off with this pair refused
          }
        };
        int lo = 0, hi = p.model->ctx_native / 256;
        if (fits(hi)) {
          lo = hi;
        } else {
          --hi;
          while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (fits(mid)) lo = mid;
            else hi = mid - 1;
          }
        }
        brute = std::max(brute, lo * 256);
      }
      CHECK(best.ctx_size == brute);
    }
  }
}

// Verified alternatives (docs/ranking.md §6): each is a changed request that kvplan re-plans before it says a word
// of it, and carries as arguments a script can re-run. For a plan that recommends nothing: the pins dropped,
// another engine, a smaller model of the family, a device with more memory. For a fully pinned plan (a pasted
// command): the longest context with the same weights and types, and kvplan's own pick for the card.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "kvplan/error.hpp"
#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

// A catalog model whose weights at the fewest bits exceed every pool of the request together: no option of it fits
// there, so a re-plan would recommend nothing (what-fits skips such models the same way).
bool weights_exceed_every_pool(const Catalog& c, const Request& r) {
  const ModelSpec* m = r.model_spec ? nullptr : c.find_model(r.model);
  if (!m) return false;
  return weights_exceed_room(c, *m, room_for_weights(resolve(c, r)));
}

// The re-planned request's recommendation, or nothing when it has none (or is bad input, e.g. an engine that
// does not run on this device). The re-plan reuses the compute figures s's plan worked out.
std::optional<Suggestion> verify(const Setup& s, Request r, const std::string& summary) {
  const std::vector<std::string> args = request_args(r);
  r.suggest = false;
  try {
    if (weights_exceed_every_pool(*s.catalog, r)) return std::nullopt;
    const Plan p = plan_sharing(*s.catalog, r, s.compute_memo, /*recommendation_only=*/true);
    if (!p.recommended()) return std::nullopt;
    r.suggest = true;
    Suggestion out{summary, r, args, *p.recommended()};
    return out;
  } catch (const InputError&) {
    return std::nullopt;
  }
}

std::string describe(const Option& o) {
  return fmt::format("{} weights, {} tokens, K={} V={}, {} (~{})", o.weights, o.ctx_per_slot, o.cache_type_k, o.cache_type_v,
                     risk_name(o.quality.risk), loss_pct(o.quality.expected_loss));
}

void add(std::vector<Suggestion>& out, std::optional<Suggestion> s) {
  if (!s) return;
  s->summary += ": " + describe(s->option);
  out.push_back(std::move(*s));
}

// The request without what the user pinned about the option (weights, cache types, flash attention, placement, and
// unless kept the context): kvplan chooses them. A pinned context is what the user needs, so the other model or
// the larger device is asked for with it.
Request unpinned(const Request& r, bool keep_ctx = false) {
  Request u = r;
  u.weights.reset();
  if (!keep_ctx) u.ctx_size.reset();
  u.cache_type_k.reset();
  u.cache_type_v.reset();
  u.flash_attn = "auto";
  u.n_gpu_layers.reset();
  u.n_cpu_moe.reset();
  u.max_ctx = false;
  return u;
}

bool pins_something(const Request& r) {
  return r.weights || r.ctx_size || r.cache_type_k || r.cache_type_v || r.flash_attn != "auto" || r.n_gpu_layers || r.n_cpu_moe;
}

// Smaller models of the same family (at least a fifth smaller: a near twin fails the same way), the same line of
// models first, then the largest.
std::vector<const ModelSpec*> smaller_models(const Catalog& c, const ModelSpec& m) {
  std::vector<const ModelSpec*> out;
  for (const auto& x : c.models)
    if (x.family == m.family && !m.family.empty() && x.params * 5 <= m.params * 4 && x.id != m.id) out.push_back(&x);  // 20 % smaller at least
  // the same line first (qwen2.5-coder-32b -> qwen2.5-coder-14b before qwen2.5-14b): the most id words shared,
  // size words (32b, 1.5b, a3b) aside
  auto words = [](const std::string& id) {
    std::vector<std::string> out;
    std::string w;
    for (char ch : id + "-") {
      if (ch != '-') {
        w += ch;
        continue;
      }
      const bool size = !w.empty() && (w.back() == 'b' || w.back() == 'm') &&
                        w.find_first_not_of("0123456789.a", 0) == w.size() - 1 && w.find_first_of("0123456789") != std::string::npos;
      if (!w.empty() && !size) out.push_back(w);
      w.clear();
    }
    return out;
  };
  const std::vector<std::string> mine = words(m.id);
  auto shared = [&](const ModelSpec* x) {
    size_t n = 0;
    for (const auto& w : words(x->id)) n += std::count(mine.begin(), mine.end(), w) > 0;
    return n;
  };
  std::sort(out.begin(), out.end(), [&](const ModelSpec* a, const ModelSpec* b) {
    return shared(a) != shared(b) ? shared(a) > shared(b) : a->params > b->params;
  });
  return out;
}

// What a plan may use of a device: a unified-memory chip's working-set limit, a card's total.
std::int64_t usable_mib(const GpuSpec& g) { return g.unified() && g.working_set_mib > 0 ? g.working_set_mib : g.total_mib; }

bool is_laptop(const GpuSpec& g) { return g.name.find("Laptop GPU") != std::string::npos; }  // NVIDIA's driver names

// Catalog devices of the same kind with more memory, smallest first: a laptop card for a laptop, a desktop card otherwise.
std::vector<const GpuSpec*> larger_devices(const Setup& s) {
  std::vector<const GpuSpec*> out;
  const Bytes have = s.pools.front().capacity;
  const bool laptop = s.gpu && is_laptop(*s.gpu);
  for (const auto& g : s.catalog->gpus)
    if (g.backend == s.backend->id && is_laptop(g) == laptop && usable_mib(g) * kMiB > have + have / 10) out.push_back(&g);  // 10 % more at least
  std::sort(out.begin(), out.end(), [](const GpuSpec* a, const GpuSpec* b) { return usable_mib(*a) < usable_mib(*b); });
  return out;
}

void when_nothing_acceptable(const Setup& s, std::vector<Suggestion>& out) {
  const Request& r = s.request;
  const Catalog& c = *s.catalog;
  // When kvplan's own choice works on this device at the context asked for, the pin was the problem: a smaller model
  // or a larger card would trade away what the user has for nothing (a Q4_K_M 270M model on 8 GB is not short of
  // memory, its weights are too lossy).
  bool pin_is_the_problem = false;
  if (pins_something(r))
    if (auto sug = verify(s, unpinned(r), "let kvplan choose the weights, context, cache types and placement")) {
      pin_is_the_problem = !r.ctx_size || sug->option.ctx_size >= *r.ctx_size;  // it keeps the context asked for
      add(out, std::move(sug));
    }
  if (s.runtime) {
    Request e = r;
    e.engine = "llama.cpp";
    // other engines size a context per conversation; llama.cpp's -c is shared by its slots
    if (e.ctx_size && !e.kv_unified)  // in 64 bits, capped as plan() caps a context (2^30 tokens)
      e.ctx_size = static_cast<int>(std::min<long long>(1LL << 30, static_cast<long long>(*e.ctx_size) * std::max(1, e.n_parallel)));
    add(out, verify(s, e, fmt::format("llama.cpp instead of {} (more weight formats, and layers or experts in RAM)", s.runtime->name)));
  }
  if (pin_is_the_problem) return;
  if (!r.model_spec) {
    int tried = 0;
    for (const ModelSpec* m : smaller_models(c, *s.model)) {
      Request smaller = unpinned(r, true);
      smaller.model = m->id;
      if (auto sug = verify(s, smaller, fmt::format("the smaller {} ({:.1f}B params)", m->name, m->params / 1e9))) {
        add(out, std::move(sug));
        break;
      }
      if (++tried == 2) break;
    }
  }
  if (s.gpu_pools.size() <= 1 && r.extra_gpus.empty()) {
    int tried = 0;
    for (const GpuSpec* g : larger_devices(s)) {
      Request bigger = unpinned(r, true);
      bigger.gpu = g->id;
      bigger.free.reset();
      if (auto sug = verify(s, bigger, g->unified() ? fmt::format("a device with more memory: {} ({} GiB, {} GiB of it for the GPU)", g->name, g->total_mib / 1024, usable_mib(*g) / 1024)
                                   : fmt::format("a device with more memory: {} ({} GiB)", g->name, g->total_mib / 1024))) {
        add(out, std::move(sug));
        break;
      }
      if (++tried == 3) break;
    }
  }
}

// A fully pinned plan (a pasted launch line): what the same card does with the same weights and types, and
// what kvplan would pick.
void for_pinned_plan(const Setup& s, const Plan& p, std::vector<Suggestion>& out) {
  const Option& have = p.options.front();
  Request longer = s.request;
  longer.ctx_size.reset();
  longer.flash_attn = "auto";
  if (auto sug = verify(s, longer, "the same weights and cache types, the longest context this card holds");
      sug && sug->option.ctx_per_slot > have.ctx_per_slot)
    add(out, std::move(sug));
  if (auto sug = verify(s, unpinned(s.request), "kvplan's pick for this card and task");
      sug && (sug->option.weights != have.weights || sug->option.cache_type_k != have.cache_type_k ||
              sug->option.cache_type_v != have.cache_type_v || sug->option.ctx_per_slot != have.ctx_per_slot))
    add(out, std::move(sug));
}

}  // namespace

std::vector<Suggestion> suggestions_for(const Setup& s, const Plan& p) {
  std::vector<Suggestion> out;
  if (p.verdict != "ok") when_nothing_acceptable(s, out);
  else if (p.mode == "single" && p.fits()) for_pinned_plan(s, p, out);
  return out;
}

}  // namespace kvplan::detail

// "What can I run?" and "what do I need?" (docs/ranking.md §9, §10): plan() once per model (or per device), then
// rank or search. Each model is planned once; the plans run on every core, since each is a pure function.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "kvplan/error.hpp"
#include "kvplan/whatfits.hpp"
#include "planner/setup.hpp"

namespace kvplan {
namespace {

// fn(i) for i in [0, n), spread over the machine's cores; the first exception is rethrown after all have stopped.
template <class F>
void parallel_for(size_t n, F fn) {
  const size_t workers = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

struct Candidate {  // one model to plan: by name, or read from a file
  std::string name;
  std::shared_ptr<const ModelSpec> spec;
  const ModelSpec* model = nullptr;  // the catalog's entry when it is one (filters read it before planning)
};

std::vector<Candidate> candidates_of(const Catalog& c, const WhatFitsRequest& q) {
  std::vector<Candidate> out;
  if (q.models.empty() && q.model_specs.empty())
    for (const auto& m : c.models) out.push_back({m.id, nullptr, &m});
  for (const auto& name : q.models) out.push_back({name, nullptr, c.find_model(name)});
  for (const auto& spec : q.model_specs) out.push_back({spec->id, spec, spec.get()});
  return out;
}

void check_filters(const Catalog& c, const WhatFitsRequest& q) {
  if (!q.arch_kind.empty() && q.arch_kind != "moe" && q.arch_kind != "dense")
    throw InputError("--arch-kind", q.arch_kind, "is not an architecture kind", {"moe", "dense"}, closest_match(q.arch_kind, {"moe", "dense"}));
  if (!q.family.empty()) {
    std::vector<std::string> families;
    for (const auto& m : c.models)
      if (std::find(families.begin(), families.end(), m.family) == families.end()) families.push_back(m.family);
    if (std::find(families.begin(), families.end(), q.family) == families.end())
      throw InputError("--family", q.family, "is not a catalog model family", families, closest_match(q.family, families));
  }
  check_license_filter(c, q.licenses);
  if (q.min_ctx && *q.min_ctx < 256) throw InputError("--min-ctx", std::to_string(*q.min_ctx), "must be at least 256 tokens");
  if (q.min_tps && !(*q.min_tps > 0)) throw InputError("--min-tps", fmt::format("{:g}", *q.min_tps), "must be tokens per second above 0");
  if (q.top < 1) throw InputError("--top", std::to_string(q.top), "must be at least 1");
  const Request& r = q.base;
  if (r.max_ctx || (r.cache_type_k && r.cache_type_v && !r.ctx_size))
    throw InputError(r.max_ctx ? "--max-ctx" : "--cache-type-v", "", "asks each model for its longest context, which what-fits does not rank by; "
                     "pin --ctx-size too, or leave a cache type free");
}

bool passes_kind(const Catalog& c, const WhatFitsRequest& q, const ModelSpec* m) {
  if (!m) return true;  // a GGUF file name: read by the planner; the kind filters apply after planning
  if (!q.family.empty() && m->family != q.family) return false;
  if (!license_matches(c, m->license, q.licenses)) return false;
  if (q.arch_kind == "moe" && !m->moe) return false;
  if (q.arch_kind == "dense" && m->moe) return false;
  return true;
}

std::string speed_text(const Option& o) { return o.decode_tps > 0 ? fmt::format("{:.0f} tok/s", o.decode_tps) : "speed unknown"; }

FitRow row_for(const Plan& p, const QualityScale& qs, const Catalog& c, const TaskProfile& task) {
  const Option& o = *p.recommended();
  FitRow row;
  row.model = p.model->id;
  row.name = p.model->name;
  row.family = p.model->family;
  row.license = p.model->license;
  row.params = p.model->params;
  row.moe = p.model->moe.has_value();
  row.quality = task_quality(qs, c, *p.model);
  row.option = o;
  row.target_ctx = task.ctx_target;
  // the planner's objective uses the target capped by the model's window; here a short window costs too
  const double plan_objective = o.score + detail::context_term(o.ctx_per_slot, task.ctx_target) - detail::context_term(o.ctx_per_slot, p.target_ctx);
  row.plan_factor = std::exp(plan_objective);
  row.score = row.quality.value * row.plan_factor;
  row.reaches_min = o.ctx_per_slot >= task.ctx_min;
  row.meets_floor = o.decode_tps <= 0 || o.decode_tps >= task.decode_floor_tps;
  row.why = fmt::format("quality {:.1f}{} x plan {:.2f} ({} {:+.1f}% loss, {} of {} tokens, {})", row.quality.value,
                        row.quality.estimated ? " (estimated)" : "", row.plan_factor, o.weights, 100 * o.quality.expected_loss,
                        o.ctx_per_slot, task.ctx_target, speed_text(o));
  if (!row.reaches_min) row.why += fmt::format("; below the task minimum of {}", task.ctx_min);
  if (!row.meets_floor) row.why += fmt::format("; below the {:g} tok/s floor", task.decode_floor_tps);
  return row;
}

bool passes_option_filters(const Catalog& c, const WhatFitsRequest& q, const FitRow& row) {
  if (!license_matches(c, row.license, q.licenses)) return false;
  if (q.min_ctx && row.option.ctx_per_slot < *q.min_ctx) return false;
  if (q.min_tps && row.option.decode_tps < *q.min_tps) return false;
  if (!q.family.empty() && row.family != q.family) return false;
  if ((q.arch_kind == "moe" && !row.moe) || (q.arch_kind == "dense" && row.moe)) return false;
  return true;
}

// The most bytes the request's pools hold together, for a bound that skips models whose weights cannot fit at any
// GGUF format (0: no bound: an unbounded pool, or an engine with formats of its own).
Bytes room_for_weights(const Catalog& c, const WhatFitsRequest& q, const std::vector<Candidate>& todo) {
  if (todo.empty()) return 0;
  Request r = q.base;
  r.model = todo.front().name;
  r.model_spec = todo.front().spec;
  return detail::room_for_weights(detail::resolve(c, r));
}

}  // namespace

// "open": an OSI-approved license; "other": a custom license (the Hub's `license: other`); else a license id.
void check_license_filter(const Catalog& c, const std::vector<std::string>& licenses) {
  std::vector<std::string> accepted = {"open", "other"};
  for (const auto& l : c.licenses) accepted.push_back(l.id);
  for (const auto& v : licenses)
    if (std::find(accepted.begin(), accepted.end(), v) == accepted.end())
      throw InputError("--license", v, "is not a license id, 'open' (OSI-approved) or 'other' (a custom license)", accepted,
                       closest_match(v, accepted));
}

bool license_matches(const Catalog& c, const std::string& license, const std::vector<std::string>& filter) {
  if (filter.empty()) return true;
  const LicenseSpec* l = c.find_license(license);  // nullptr: a model read from a file, whose license kvplan does not know
  if (!l) return false;
  return std::any_of(filter.begin(), filter.end(), [&](const std::string& v) {
    return v == l->id || (v == "open" && l->osi) || (v == "other" && l->hub == "other");
  });
}

bool fit_ranks_before(const FitRow& a, const FitRow& b) {
  const auto tier = [](const FitRow& r) { return std::make_pair(!r.reaches_min, !r.meets_floor); };
  if (tier(a) != tier(b)) return tier(a) < tier(b);
  if (a.score != b.score) return a.score > b.score;
  return a.model < b.model;
}

WhatFits what_fits(const Catalog& c, const WhatFitsRequest& q) {
  check_filters(c, q);
  WhatFits out;
  out.request = q;
  out.task = &c.task(q.base.task);
  const QualityScale qs = quality_scale(c, out.task->id);
  out.reference = qs.reference;
  std::vector<Candidate> todo;
  for (auto& cand : candidates_of(c, q)) {
    if (passes_kind(c, q, cand.model)) todo.push_back(std::move(cand));
    else ++out.filtered;
  }
  out.considered = static_cast<int>(todo.size());
  const Bytes room = room_for_weights(c, q, todo);
  std::vector<std::optional<Plan>> plans(todo.size());
  std::vector<std::string> refused(todo.size());
  const bool named = !q.models.empty() || !q.model_specs.empty();
  parallel_for(todo.size(), [&](size_t i) {
    Request r = q.base;
    r.model = todo[i].name;
    r.model_spec = todo[i].spec;
    r.top = 1;
    r.suggest = false;
    if (q.min_ctx && *q.min_ctx > out.task->ctx_target && !r.ctx_size) r.ctx_size = *q.min_ctx;  // plan at the asked context
    if (!todo[i].spec && todo[i].model && detail::weights_exceed_room(c, *todo[i].model, room)) {
      refused[i] = "its weights exceed every pool together at any format";  // not planned: it cannot fit
      return;
    }
    try {
      plans[i] = plan(c, r);
    } catch (const InputError& e) {
      if (named && !c.find_model(todo[i].name) && !todo[i].spec) throw;  // a name the user typed that nothing knows
      refused[i] = e.what();  // e.g. the engine cannot run this architecture, or the window is shorter than --min-ctx
    }
  });
  for (size_t i = 0; i < todo.size(); ++i) {
    if (!plans[i]) {
      ++out.not_fitting;
      continue;
    }
    if (out.pools.empty()) out.pools = plans[i]->pools;
    if (!plans[i]->recommended()) {
      ++out.not_fitting;
      continue;
    }
    ++out.fitting;
    FitRow row = row_for(*plans[i], qs, c, *out.task);
    if (passes_option_filters(c, q, row)) out.rows.push_back(std::move(row));
    else ++out.filtered;
  }
  std::sort(out.rows.begin(), out.rows.end(), fit_ranks_before);
  if (out.rows.size() > static_cast<size_t>(q.top)) out.rows.resize(static_cast<size_t>(q.top));
  if (qs.measured.empty()) out.notes.push_back("no published figures for the " + out.task->id + " task in data/quality/: models are ranked by their plans alone");
  if (q.min_tps) out.notes.push_back("--min-tps leaves out models whose speed is unknown");
  return out;
}

// ---------- needs ----------
namespace {

struct Judge {  // what "meets the task" means for one model (docs/ranking.md §10)
  const Catalog* c;
  const TaskProfile* task;
  double floor = 0;
  double k_bits(const Plan& p, const std::string& type) const {
    detail::Setup s;  // k_storage_bits reads the catalog and the runtime only
    s.catalog = c;
    s.runtime = p.resolved.engine_id == "llama.cpp" ? nullptr : c->runtime(p.resolved.engine_id);
    return detail::k_storage_bits(s, type);
  }
  // The best-ranked option on the device alone that reaches the target with K at 8 bits or more, at the speed floor.
  std::optional<Option> meets(const Plan& p, bool judge_speed) const {
    if (!p.fits()) return std::nullopt;
    for (const auto& o : p.options) {
      if (!o.fits() || o.n_gpu_layers || o.n_cpu_moe || o.quality.risk == Risk::avoid) continue;
      if (o.ctx_per_slot < p.target_ctx || k_bits(p, o.cache_type_k) < 8) continue;
      if (judge_speed && o.decode_tps > 0 && o.decode_tps < floor) continue;
      return o;
    }
    return std::nullopt;
  }
};

std::optional<Option> try_device(const Catalog& c, const Request& base, const Judge& j, const std::string& gpu, bool judge_speed) {
  Request r = base;
  r.gpu = gpu;
  r.extra_gpus.clear();
  r.top = 1000;  // every kept option: the first that meets the requirement, not only the recommendation
  r.suggest = false;
  try {
    return j.meets(plan(c, r), judge_speed);
  } catch (const InputError&) {
    return std::nullopt;  // the engine cannot run it there (a backend without kernels, a runtime's own limits)
  }
}

Bytes usable(const GpuSpec& g) { return (g.unified() && g.working_set_mib > 0 ? g.working_set_mib : g.total_mib) * (1LL << 20); }

// The smallest bare size (MiB resolution) that meets the context and K requirement; speed is not judged.
std::optional<NeedsDevice> smallest_memory(const Catalog& c, const Request& base, const Judge& j) {
  auto at = [&](std::int64_t mib) { return try_device(c, base, j, fmt::format("{}MiB", mib), false); };
  std::int64_t hi = 4096;
  while (!at(hi)) {
    if (hi > (4LL << 20)) return std::nullopt;  // 4 TiB
    hi *= 2;
  }
  std::int64_t lo = hi / 2;  // lo does not meet (or is the first probe's half)
  while (hi - lo > 64) {
    const std::int64_t mid = (lo + hi) / 2;
    (at(mid) ? hi : lo) = mid;
  }
  return NeedsDevice{"", fmt::format("{:.1f} GiB", hi / 1024.0), 1, hi * (1LL << 20), *at(hi)};
}

}  // namespace

NeedsResult needs(const Catalog& c, const Request& base, int max_count) {
  NeedsResult out;
  out.base = base;
  out.model = base.model_spec ? base.model_spec.get() : &c.model(base.model);
  out.task = &c.task(base.task);
  if (max_count < 1 || max_count > 16) throw InputError("--max-gpus", std::to_string(max_count), "must be 1..16");
  Request probe = base;
  probe.gpu = "1024GB";
  probe.top = 1;
  probe.suggest = false;
  out.target_ctx = plan(c, probe).target_ctx;  // bad input (an unknown engine, a pinned type) surfaces here
  out.floor_tps = out.task->decode_floor_tps;
  const Judge j{&c, out.task, out.floor_tps};
  out.smallest_memory = smallest_memory(c, base, j);
  if (!out.smallest_memory) return out;
  const Bytes need = out.smallest_memory->memory * 9 / 10;  // backends differ a little in overhead: look a bit below
  std::vector<const GpuSpec*> gpus;
  for (const auto& g : c.gpus)
    if (g.backend != "cpu") gpus.push_back(&g);
  std::stable_sort(gpus.begin(), gpus.end(), [](const GpuSpec* a, const GpuSpec* b) { return usable(*a) < usable(*b); });
  std::vector<std::optional<NeedsDevice>> multi(gpus.size());
  parallel_for(gpus.size(), [&](size_t i) {
    const GpuSpec& g = *gpus[i];
    const int max_n = g.unified() ? 1 : max_count;
    for (int n = std::max<std::int64_t>(1, need / usable(g)); n <= max_n; ++n)
      if (auto o = try_device(c, base, j, n == 1 ? g.id : fmt::format("{}x{}", n, g.id), true)) {
        multi[i] = NeedsDevice{g.id, g.name, n, usable(g) * n, *o};
        return;
      }
  });
  std::set<std::string> chips;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!multi[i]) continue;
    if (multi[i]->count == 1 && !out.smallest_gpu) out.smallest_gpu = multi[i];
    if (!gpus[i]->unified()) out.multi.push_back(*multi[i]);
    else if (gpus[i]->vendor == "apple" && chips.insert(gpus[i]->name).second) out.apple.push_back(*multi[i]);
  }
  std::stable_sort(out.multi.begin(), out.multi.end(), [](const NeedsDevice& a, const NeedsDevice& b) { return a.memory < b.memory; });
  return out;
}

}  // namespace kvplan

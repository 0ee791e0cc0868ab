// What-fits and needs as compact tables. Formatting only: every number comes from libplanner.
#include <fmt/format.h>

#include "kvplan/units.hpp"
#include "render.hpp"

namespace kvplan::cli {
namespace {

std::string speed(const Option& o) { return o.decode_tps > 0 ? fmt::format("{:.0f}", o.decode_tps) : "?"; }
std::string ctx_k(int ctx) { return ctx >= 1024 ? fmt::format("{}K", ctx / 1024) : std::to_string(ctx); }
std::string ram(const Option& o) {
  for (const auto& u : o.pools)
    if (u.pool == "host" && u.allocations > 0 && (o.n_gpu_layers || o.n_cpu_moe)) return format_gib(u.allocations);
  return "-";
}

}  // namespace

std::string render_what_fits(const WhatFits& w) {
  const TaskProfile& t = *w.task;
  std::string devices;
  for (const auto& p : w.pools)
    if (p.kind != "host") devices += (devices.empty() ? "" : " + ") + p.device;
  std::string out = fmt::format("What fits on {} for {} (target {} tokens, minimum {}, speed floor {:g} tok/s)\n", devices, t.id,
                                t.ctx_target, t.ctx_min, t.decode_floor_tps);
  out += fmt::format("{} models planned: {} fit, {} do not, {} left out by filters. Ranked by task quality ({} scale) x what the plan keeps of it.\n\n",
                     w.considered, w.fitting, w.not_fitting, w.filtered, w.reference.empty() ? "none" : w.reference);
  out += fmt::format("{:>3}  {:<28} {:>7} {:>7}  {:<7} {:>5} {:<11} {:>5} {:>6}  {:>5}  {:>5}\n", "#", "model", "params", "quality",
                     "weights", "ctx", "K/V", "tok/s", "RAM GB", "plan", "score");
  int rank = 0;
  bool estimated = false;
  for (const auto& r : w.rows) {
    const Option& o = r.option;
    estimated |= r.quality.estimated;
    std::string flags = r.reaches_min ? "" : " <min ctx";
    if (!r.meets_floor) flags += " <floor";
    out += fmt::format("{:>3}  {:<28} {:>6.1f}B {:>6.1f}{} {:<7} {:>5} {:<11} {:>5} {:>6}  {:>5.2f}  {:>5.1f}{}\n", ++rank, r.model.substr(0, 28),
                       static_cast<double>(r.params) / 1e9, r.quality.value, r.quality.estimated ? "e" : " ", o.weights, ctx_k(o.ctx_per_slot),
                       o.cache_type_k + "/" + o.cache_type_v, speed(o), ram(o), r.plan_factor, r.score, flags);
  }
  if (w.rows.empty()) out += "  (no model fits with these filters)\n";
  if (estimated) out += "\ne: no published figure for this task; estimated from the family's figures (or the catalog's) scaled by size (--json says which).\n";
  out += "quality: the task figure less its uncertainty (one standard deviation: fewer sources, a far-stretched equating or an estimate\n"
         "rank lower; docs/ranking.md §8).\n";
  out += "plan: what the recommended option keeps of the model's quality (weights and K/V loss, context short of the target, speed; docs/ranking.md §9).\n";
  for (const auto& n : w.notes) out += "Note: " + n + "\n";
  return out;
}

std::string render_needs(const NeedsResult& n) {
  std::string out = fmt::format("What {} needs for {}: {} tokens per conversation with K at 8 bits or more, on the device alone, "
                                "at {:g} tok/s or more\n\n", n.model->name, n.task->id, n.target_ctx, n.floor_tps);
  auto line = [](const NeedsDevice& d) {
    const Option& o = d.option;
    return fmt::format("{} ({} GiB): {} {} {}/{}, {} tok/s", d.count > 1 ? fmt::format("{} x {}", d.count, d.name) : d.name,
                       format_gib(d.memory), o.weights, ctx_k(o.ctx_per_slot), o.cache_type_k, o.cache_type_v, speed(o));
  };
  if (n.smallest_memory) out += "Smallest memory   " + format_gib(n.smallest_memory->memory) + " GiB (a bare size: speed not judged; " +
                                n.smallest_memory->option.weights + ")\n";
  out += "Smallest GPU      " + (n.smallest_gpu ? line(*n.smallest_gpu) : std::string("none in the catalog")) + "\n";
  if (!n.multi.empty()) {
    out += "\nSeveral GPUs (the fewest of each kind, up to the count searched; smallest total first):\n";
    for (size_t i = 0; i < n.multi.size() && i < 12; ++i) out += "  " + line(n.multi[i]) + "\n";
    if (n.multi.size() > 12) out += fmt::format("  ... and {} more (--json lists them)\n", n.multi.size() - 12);
  }
  if (!n.apple.empty()) {
    out += "\nApple (each chip's smallest configuration that suffices):\n";
    for (const auto& d : n.apple) out += "  " + line(d) + "\n";
  }
  if (!n.found()) out += "\nNothing in the catalog meets the requirement.\n";
  return out;
}

}  // namespace kvplan::cli

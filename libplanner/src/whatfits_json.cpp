// What-fits and needs as JSON: the contract of schema/what_fits.schema.json. Any key change bumps
// kWhatFitsSchemaVersion.
#include <cmath>
#include <nlohmann/json.hpp>

#include "kvplan/whatfits.hpp"

namespace kvplan {
namespace {

using json = nlohmann::ordered_json;

double round1(double x) { return std::round(x * 10) / 10; }
json maybe(double x) { return x > 0 ? json(round1(x)) : json(nullptr); }
template <typename T>
json optional_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// One recommended option in brief: what to run, what it holds where, what it costs, how fast.
json option_brief(const Option& o) {
  Bytes host = 0;
  for (const auto& u : o.pools)
    if (u.pool == "host") host = u.allocations;
  return {{"weights", o.weights},
          {"ctx_size", o.ctx_size},
          {"ctx_per_slot", o.ctx_per_slot},
          {"cache_type_k", o.cache_type_k},
          {"cache_type_v", o.cache_type_v},
          {"flash_attn", o.flash_attn ? "on" : "off"},
          {"device_bytes", o.device_total()},
          {"headroom_bytes", o.device_headroom()},
          {"host_bytes", host},
          {"n_gpu_layers", optional_json(o.n_gpu_layers)},
          {"n_cpu_moe", optional_json(o.n_cpu_moe)},
          {"expected_loss", o.quality.expected_loss},
          {"weights_loss", o.quality.weights_loss},
          {"kv_loss", o.quality.kv_loss},
          {"risk", risk_name(o.quality.risk)},
          {"decode_tokens_per_s", maybe(o.decode_tps)},
          {"time_to_first_token_s", maybe(o.ttft_s)},
          {"objective", std::round(o.score * 1e6) / 1e6},
          {"reason", o.reason},
          {"launch", o.launch}};
}

json quality_json(const TaskQuality& q) {
  return {{"value", round1(q.value)}, {"mean", round1(q.mean)}, {"sd", round1(q.sd)}, {"estimated", q.estimated}, {"basis", q.basis}, {"benchmarks", q.benchmarks}};
}

json device_json(const NeedsDevice& d) {
  return {{"gpu", d.gpu.empty() ? json(nullptr) : json(d.gpu)}, {"name", d.name}, {"count", d.count}, {"memory_bytes", d.memory},
          {"option", option_brief(d.option)}};
}

std::string dump(const json& j, int indent) { return j.dump(indent, ' ', false, json::error_handler_t::replace) + "\n"; }

}  // namespace

std::string to_json(const WhatFits& w, int indent) {
  const WhatFitsRequest& q = w.request;
  json j;
  j["schema_version"] = kWhatFitsSchemaVersion;
  j["kind"] = "what_fits";
  json gpus = json::array({q.base.gpu});
  for (const auto& g : q.base.extra_gpus) gpus.push_back(g);
  j["request"] = {{"gpu", gpus},          {"task", w.task->id},       {"engine", q.base.engine},
                  {"models", q.models},   {"min_ctx", optional_json(q.min_ctx)}, {"min_tps", optional_json(q.min_tps)},
                  {"family", q.family.empty() ? json(nullptr) : json(q.family)},
                  {"arch_kind", q.arch_kind.empty() ? json(nullptr) : json(q.arch_kind)}, {"license", q.licenses}, {"top", q.top}};
  j["task"] = {{"id", w.task->id}, {"ctx_target", w.task->ctx_target}, {"ctx_min", w.task->ctx_min},
               {"decode_floor_tps", w.task->decode_floor_tps}, {"quality_reference", w.reference.empty() ? json(nullptr) : json(w.reference)}};
  json devices = json::array();
  for (const auto& p : w.pools) devices.push_back({{"pool", p.id}, {"kind", p.kind}, {"device", p.device}, {"capacity_bytes", p.capacity}});
  j["pools"] = devices;
  j["counts"] = {{"considered", w.considered}, {"fitting", w.fitting}, {"not_fitting", w.not_fitting}, {"filtered", w.filtered}};
  json rows = json::array();
  int rank = 0;
  for (const auto& r : w.rows)
    rows.push_back({{"rank", ++rank},
                    {"model", r.model},
                    {"name", r.name},
                    {"family", r.family},
                    {"license", r.license.empty() ? json(nullptr) : json(r.license)},
                    {"params", r.params},
                    {"moe", r.moe},
                    {"quality", quality_json(r.quality)},
                    {"reaches_task_min", r.reaches_min},
                    {"meets_speed_floor", r.meets_floor},
                    {"plan_factor", std::round(r.plan_factor * 1e4) / 1e4},
                    {"score", std::round(r.score * 1e3) / 1e3},
                    {"why", r.why},
                    {"option", option_brief(r.option)}});
  j["rows"] = rows;
  j["notes"] = w.notes;
  return dump(j, indent);
}

std::string to_json(const NeedsResult& n, int indent) {
  json j;
  j["schema_version"] = kWhatFitsSchemaVersion;
  j["kind"] = "needs";
  j["request"] = {{"model", n.model->id}, {"task", n.task->id}, {"engine", n.base.engine}};
  j["requirement"] = {{"ctx_per_slot", n.target_ctx}, {"k_bits_min", 8}, {"decode_floor_tps", n.floor_tps}, {"on_device", true}};
  j["found"] = n.found();
  j["smallest_gpu"] = n.smallest_gpu ? device_json(*n.smallest_gpu) : json(nullptr);
  j["smallest_memory"] = n.smallest_memory ? device_json(*n.smallest_memory) : json(nullptr);
  json multi = json::array(), apple = json::array();
  for (const auto& d : n.multi) multi.push_back(device_json(d));
  for (const auto& d : n.apple) apple.push_back(device_json(d));
  j["multi_gpu"] = multi;
  j["apple"] = apple;
  return dump(j, indent);
}

}  // namespace kvplan

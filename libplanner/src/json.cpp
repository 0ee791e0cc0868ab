// The plan as JSON: the contract of schema/plan.schema.json. Keys say their unit and use
// llama.cpp's words. Any key change bumps kSchemaVersion.
#include <cmath>
#include <nlohmann/json.hpp>

#include "kvplan/memory.hpp"
#include "kvplan/plan.hpp"

namespace kvplan {
namespace {

using json = nlohmann::ordered_json;

const char* accuracy_name(Accuracy a) { return a == Accuracy::exact ? "exact" : "estimate"; }

json figure_json(const Figure& f) {
  return json{{"bytes", f.bytes}, {"unpadded_bytes", f.unpadded}, {"high_bytes", f.high}, {"accuracy", accuracy_name(f.accuracy)}};
}

template <typename T>
json optional_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// The memory object of one option in one pool: the design's named keys.
json memory_json(const Option& o, const Pool& pool) {
  static const std::pair<const char*, const char*> kinds[] = {
      {"weights", "weights_bytes"},   {"k_cache", "k_cache_bytes"},         {"v_cache", "v_cache_bytes"},
      {"swa_k_cache", "swa_k_cache_bytes"}, {"swa_v_cache", "swa_v_cache_bytes"}, {"state", "state_bytes"},
      {"compute", "compute_bytes"}};
  json m = json::object();
  json accuracy = json::object();
  json high = json::object();
  json unpadded = json::object();
  for (const auto& [what, key] : kinds) {
    Figure f;
    bool any_estimate = false;
    for (const auto& a : o.allocations)
      if (a.what == what && a.pool == pool.id) {
        f.bytes += a.figure.bytes;
        f.high += a.figure.high;
        f.unpadded += a.figure.unpadded;
        any_estimate |= a.figure.accuracy == Accuracy::estimate;
      }
    m[key] = f.bytes;
    accuracy[key] = any_estimate ? "estimate" : "exact";
    high[key] = f.high;
    unpadded[key] = f.unpadded;
  }
  Bytes host_weights = 0;
  for (const auto& a : o.allocations)
    if (a.what == "weights_host") host_weights += a.figure.bytes;
  m["weights_host_bytes"] = host_weights;
  accuracy["weights_host_bytes"] = "estimate";
  m["kv_total_bytes"] = o.kv_total(pool.id);
  accuracy["kv_total_bytes"] = "exact";
  m["overhead_bytes"] = pool.overhead.bytes;
  accuracy["overhead_bytes"] = "estimate";
  high["overhead_bytes"] = pool.overhead.high;
  m["margin_bytes"] = pool.margin;
  accuracy["margin_bytes"] = "exact";
  const PoolUsage& u = o.usage(pool.id);
  m["total_bytes"] = u.total;
  accuracy["total_bytes"] = "estimate";
  high["total_bytes"] = u.total_high;
  m["headroom_bytes"] = u.headroom;
  accuracy["headroom_bytes"] = "estimate";
  m["accuracy"] = accuracy;
  m["high_bytes"] = high;
  m["unpadded_bytes"] = unpadded;
  return m;
}

json model_json(const ModelSpec& m) {
  const LayerCounts n = layer_counts(m);
  const json layers = {{"full", n.full}, {"sliding", n.sliding}, {"recurrent", n.recurrent}, {"none", n.none}};
  json j = {{"id", m.id},
            {"name", m.name},
            {"hf_id", m.hf_id},
            {"arch", m.arch},
            {"source", m.remote ? m.remote->kind : m.file_paths.empty() ? "catalog" : (m.file_tensors.empty() ? "config.json" : "gguf")},
            {"params", m.params},
            {"layers", m.layers},
            {"layer_kinds", layers},
            {"n_embd", m.embd},
            {"n_head", m.heads},
            {"n_head_kv", m.kv_heads},
            {"head_dim_k", m.head_dim_k},
            {"head_dim_v", m.head_dim_v},
            {"n_vocab", m.vocab},
            {"ctx_native_tokens", m.ctx_native},
            {"ctx_extended_tokens", m.ctx_extended},
            {"sliding_window", m.swa ? json{{"window_tokens", m.swa->window}, {"pattern", m.swa->pattern}, {"chunked", m.swa->chunked}}
                                     : json(nullptr)},
            {"mla", m.mla ? json{{"kv_lora_rank", m.mla->kv_lora_rank}, {"rope_dim", m.mla->rope_dim}, {"legacy", m.mla->legacy}}
                          : json(nullptr)},
            {"recurrent", m.recurrent ? json{{"kind", m.recurrent->kind},
                                             {"d_conv", m.recurrent->d_conv},
                                             {"d_inner", m.recurrent->d_inner},
                                             {"d_state", m.recurrent->d_state},
                                             {"n_group", m.recurrent->n_group},
                                             {"head_size", m.recurrent->head_size}}
                                      : json(nullptr)},
            {"moe", m.moe ? json{{"experts", m.moe->experts}, {"experts_used", m.moe->experts_used}} : json(nullptr)},
            {"file_format", m.file_format.empty() ? json(nullptr) : json(m.file_format)},
            {"files", m.file_paths},
            {"tensors", static_cast<std::int64_t>(m.file_tensors.size())},
            {"fields_used", m.fields_used},
            {"fields_assumed", m.fields_assumed}};
  return j;
}

json option_json(const Plan& p, const Option& o, int rank) {
  json j;
  j["rank"] = rank;
  j["weights"] = o.weights;
  j["ctx_size"] = o.ctx_size;
  j["ctx_per_slot"] = o.ctx_per_slot;
  j["cache_type_k"] = o.cache_type_k;
  j["cache_type_v"] = o.cache_type_v;
  j["flash_attn"] = o.flash_attn ? "on" : "off";
  j["beyond_native"] = o.beyond_native;
  j["below_task_min"] = o.below_task_min;
  j["fits"] = o.fits();
  j["memory"] = memory_json(o, p.pools.front());
  json pools = json::array();
  for (const auto& u : o.pools)
    pools.push_back({{"pool", u.pool}, {"allocations_bytes", u.allocations}, {"allocations_high_bytes", u.allocations_high},
                     {"total_bytes", u.total}, {"total_high_bytes", u.total_high}, {"headroom_bytes", u.headroom}});
  j["pools"] = pools;
  json allocs = json::array();
  for (const auto& a : o.allocations) {
    json f = figure_json(a.figure);
    allocs.push_back({{"component", a.component}, {"what", a.what}, {"pool", a.pool}, {"bytes", f["bytes"]}, {"unpadded_bytes", f["unpadded_bytes"]},
                      {"high_bytes", f["high_bytes"]}, {"accuracy", f["accuracy"]}});
  }
  j["allocations"] = allocs;
  j["quality"] = {{"expected_loss", o.quality.expected_loss}, {"low", o.quality.low},       {"high", o.quality.high},
                  {"kv_loss", o.quality.kv_loss},             {"weights_loss", o.quality.weights_loss},
                  {"task_factor", o.quality.task_factor},     {"risk", risk_name(o.quality.risk)},
                  {"extrapolated", o.quality.extrapolated},   {"analogs", o.quality.analogs}, {"evidence", o.quality.evidence}};
  j["reason"] = o.reason;
  j["needs"] = o.needs;
  j["warnings"] = o.warnings;
  json launch = json::object();
  for (const auto& l : o.launches) launch[l.name] = l.text;
  j["launch"] = launch;
  j["decode"] = o.decode_tps > 0 ? json{{"tokens_per_s", std::round(o.decode_tps * 10) / 10},
                                          {"tokens_per_s_low", std::round(o.decode_tps_low * 10) / 10},
                                          {"bound_by", o.decode_bound},
                                          {"prefill_tokens_per_s", o.prefill_tps > 0 ? json(std::round(o.prefill_tps)) : json(nullptr)},
                                          {"time_to_first_token_s", o.ttft_s > 0 ? json(std::round(o.ttft_s * 10) / 10) : json(nullptr)}}
                                    : json(nullptr);
  Bytes host = 0;
  for (const auto& u : o.pools)
    if (u.pool == "host") host = u.allocations;
  j["placement"] = {{"n_gpu_layers", o.n_gpu_layers ? json(*o.n_gpu_layers) : json(nullptr)},
                    {"n_cpu_moe", o.n_cpu_moe ? json(*o.n_cpu_moe) : json(nullptr)},
                    {"host_bytes", host}};
  j["score"] = std::round(o.score * 1e6) / 1e6;
  j["max_concurrency"] = o.max_concurrency > 0 ? json(std::floor(o.max_concurrency * 100) / 100) : json(nullptr);
  j["kv_pool_tokens"] = o.kv_pool_tokens > 0 ? json(o.kv_pool_tokens) : json(nullptr);
  json stages = json::array();
  for (const auto& st : o.stages)
    stages.push_back({{"first_layer", st.first_layer}, {"end_layer", st.end_layer}, {"embeddings", st.embeddings}, {"output", st.output},
                      {"weights_bytes", st.weights}, {"kv_bytes", st.kv}, {"total_high_bytes", st.total_high}, {"headroom_bytes", st.headroom}});
  j["stages"] = stages;
  return j;
}

}  // namespace

// Names and paths come from files and the command line and may hold invalid UTF-8: replaced (U+FFFD), not thrown.
std::string model_to_json(const ModelSpec& m, int indent) {
  return model_json(m).dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string to_json(const Plan& p, int indent) {
  json j;
  j["schema_version"] = kSchemaVersion;
  const Request& r = p.request;
  j["request"] = {{"model", r.model},
                  {"gpu", r.gpu},
                  {"task", r.task},
                  {"engine", r.engine},
                  {"build", r.build},
                  {"weights", optional_json(r.weights)},
                  {"ctx_size", optional_json(r.ctx_size)},
                  {"cache_type_k", optional_json(r.cache_type_k)},
                  {"cache_type_v", optional_json(r.cache_type_v)},
                  {"flash_attn", r.flash_attn},
                  {"n_parallel", r.n_parallel},
                  {"tensor_parallel", r.tensor_parallel},
                  {"pipeline_parallel_size", r.pipeline_parallel},
                  {"data_parallel", r.data_parallel},
                  {"expert_parallel", r.expert_parallel},
                  {"nodes", r.nodes},
                  {"interconnect", r.interconnect.empty() ? json(nullptr) : json(r.interconnect)},
                  {"max_num_seqs", optional_json(r.max_num_seqs)},
                  {"concurrency", r.concurrency},
                  {"max_batched_tokens", optional_json(r.max_batched_tokens)},
                  {"kv_unified", r.kv_unified},
                  {"n_ubatch", optional_json(r.n_ubatch)},
                  {"n_batch", optional_json(r.n_batch)},
                  {"n_outputs_max", optional_json(r.n_outputs_max)},
                  {"swa_full", r.swa_full},
                  {"n_gpu_layers", optional_json(r.n_gpu_layers)},
                  {"n_cpu_moe", optional_json(r.n_cpu_moe)},
                  {"fit_placement", r.fit_placement},
                  {"extra_gpus", r.extra_gpus},
                  {"rpc_servers", r.rpc_servers},
                  {"override_tensors", r.override_tensors},
                  {"server_args", r.server_args},
                  {"program", r.program},
                  {"tensor_split", r.tensor_split},
                  {"split_mode", r.split_mode},
                  {"model_draft", r.model_draft_spec ? json(r.model_draft_spec->name) : r.model_draft.empty() ? json(nullptr) : json(r.model_draft)},
                  {"mmproj", r.mmproj ? json(r.mmproj->path) : json(nullptr)},
                  {"fit_target_mib", optional_json(r.fit_target_mib)},
                  {"host_ram_bytes", optional_json(r.host_ram)},
                  {"host_bandwidth_gbs", optional_json(r.host_bandwidth_gbs)},
                  {"rope_scaling", optional_json(r.rope_scaling)},
                  {"rope_scale", optional_json(r.rope_scale)},
                  {"yarn_orig_ctx", optional_json(r.yarn_orig_ctx)},
                  {"allow_slow", r.allow_slow},
                  {"reserve_bytes", optional_json(r.reserve)},
                  {"free_bytes", optional_json(r.free)},
                  {"top", r.top},
                  {"max_ctx", r.max_ctx},
                  {"accept_risk", r.accept_risk},
                  {"host_ram_source", r.host_ram_source.empty() ? json(nullptr) : json(r.host_ram_source)}};
  const Resolved& s = p.resolved;
  j["request"]["backend"] = optional_json(r.backend);
  j["resolved"] = {{"engine", s.engine},
                   {"engine_id", s.engine_id},
                   {"memory_fraction", s.memory_fraction > 0 ? json(s.memory_fraction) : json(nullptr)},
                   {"engine_build", s.engine_build},
                   {"backend", s.backend},
                   {"backend_verified", s.backend_verified},
                   {"build", s.build},
                   {"n_parallel", s.n_parallel},
                   {"tensor_parallel", s.tensor_parallel},
                   {"kv_unified", s.kv_unified},
                   {"n_ubatch", s.n_ubatch},
                   {"n_batch", s.n_batch},
                   {"n_outputs_max", s.n_outputs_max},
                   {"program", s.program},
                   {"swa_full", s.swa_full},
                   {"n_gpu_layers", optional_json(s.n_gpu_layers)},
                   {"n_cpu_moe", optional_json(s.n_cpu_moe)},
                   {"placement", s.placement},
                   {"tensor_split", s.tensor_split},
                   {"pipeline_parallel", s.pipeline_parallel},
                   {"serving", s.engine_id == "vllm" || s.engine_id == "sglang"
                                   ? json{{"tensor_parallel", s.tensor_parallel}, {"pipeline_stages", s.pipeline_stages},
                                          {"data_parallel", s.data_parallel}, {"expert_parallel", s.expert_parallel}, {"nodes", s.nodes},
                                          {"interconnect", s.interconnect.empty() ? json(nullptr) : json(s.interconnect)},
                                          {"max_num_seqs", s.max_num_seqs > 0 ? json(s.max_num_seqs) : json(nullptr)},
                                          {"max_num_seqs_source", s.max_num_seqs_source}, {"concurrency", s.concurrency},
                                          {"max_batched_tokens", s.max_batched_tokens}}
                                   : json(nullptr)},
                   {"draft", s.draft_max > 0 ? json{{"file", s.draft_file}, {"weights", s.draft_weights},
                                                    {"cache_type_k", s.draft_type_k}, {"cache_type_v", s.draft_type_v},
                                                    {"n_gpu_layers", optional_json(s.n_gpu_layers_draft)},
                                                    {"draft_max", s.draft_max},
                                                    {"device", s.draft_device.empty() ? json(nullptr) : json(s.draft_device)}}
                                              : json(nullptr)},
                   {"mmproj", s.mmproj_file.empty() ? json(nullptr) : json{{"file", s.mmproj_file}, {"offload", s.mmproj_offload}}},
                   {"fit_target_mib", s.fit_target_mib > 0 ? json(s.fit_target_mib) : json(nullptr)},
                   {"mode", p.mode}};
  const ModelSpec& m = *p.model;
  j["model"] = model_json(m);
  j["task"] = {{"id", p.task->id}, {"name", p.task->name}, {"ctx_target_tokens", p.task->ctx_target}, {"ctx_min_tokens", p.task->ctx_min}};
  j["speed_floor"] = {{"decode_tokens_per_s", p.task->decode_floor_tps},
                      {"time_to_first_token_s", p.task->ttft_max_s > 0 ? json(p.task->ttft_max_s) : json(nullptr)},
                      {"source", p.task->speed_source}};
  json pools = json::array();
  const Option* rec = p.recommended();
  for (const auto& pool : p.pools) {
    json pj = {{"id", pool.id},
               {"kind", pool.kind},
               {"device", pool.device},
               {"detected", pool.detected.empty() ? json(nullptr) : json(pool.detected)},
               {"backend", pool.backend},
               {"bounded", pool.bounded()},
               {"capacity_bytes", pool.capacity},
               {"reserve_bytes", pool.reserve},
               {"overhead_bytes", pool.overhead.bytes},
               {"overhead_high_bytes", pool.overhead.high},
               {"margin_bytes", pool.margin},
               {"budget_bytes", pool.bounded() ? pool.budget() : 0}};
    if (rec) {
      json breakdown = json::object();
      // one key per kind, summed over components (main, draft, projector) and over the layers' devices that share
      // this pool (a unified device holds the host layers' share too): an entry never hides another of its kind
      for (const auto& a : rec->allocations)
        if (a.pool == pool.id) {
          const std::string key = a.what + "_bytes";
          breakdown[key] = breakdown.value(key, Bytes{0}) + a.figure.bytes;
        }
      pj["breakdown"] = breakdown;
      pj["headroom_bytes"] = rec->usage(pool.id).headroom;
    } else {
      pj["breakdown"] = json::object();
      pj["headroom_bytes"] = nullptr;
    }
    pools.push_back(pj);
  }
  j["pools"] = pools;
  j["components"] = json::array({{{"id", "main"}, {"model", m.id}}});
  if (p.resolved.draft_max > 0) j["components"].push_back({{"id", "draft"}, {"model", p.resolved.draft_file}});
  if (!p.resolved.mmproj_file.empty()) j["components"].push_back({{"id", "mmproj"}, {"model", p.resolved.mmproj_file}});
  json options = json::array();
  for (size_t i = 0; i < p.options.size(); ++i) options.push_back(option_json(p, p.options[i], static_cast<int>(i + 1)));
  j["options"] = options;
  j["recommended"] = rec ? json(1) : json(nullptr);
  j["verdict"] = p.verdict;
  j["fits"] = p.fits();
  j["nothing_acceptable"] = p.nothing_acceptable.empty() ? json(nullptr) : json(p.nothing_acceptable);
  json suggestions = json::array();
  for (const auto& sug : p.suggestions) {
    const Option& o = sug.option;
    suggestions.push_back({{"summary", sug.summary},
                           {"args", sug.args},
                           {"option", {{"weights", o.weights}, {"ctx_size", o.ctx_size}, {"ctx_per_slot", o.ctx_per_slot},
                                       {"cache_type_k", o.cache_type_k}, {"cache_type_v", o.cache_type_v},
                                       {"flash_attn", o.flash_attn ? "on" : "off"}, {"risk", risk_name(o.quality.risk)},
                                       {"expected_loss", o.quality.expected_loss},
                                       {"decode_tokens_per_s", o.decode_tps > 0 ? json(std::round(o.decode_tps * 10) / 10) : json(nullptr)},
                                       {"n_gpu_layers", o.n_gpu_layers ? json(*o.n_gpu_layers) : json(nullptr)},
                                       {"n_cpu_moe", o.n_cpu_moe ? json(*o.n_cpu_moe) : json(nullptr)},
                                       {"launch", o.launch}}}});
  }
  j["suggestions"] = suggestions;
  j["nothing_fits"] = p.nothing_fits.empty() ? json(nullptr) : json(p.nothing_fits);
  j["explanation"] = p.explanation;
  j["warnings"] = p.warnings;
  return j.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace kvplan

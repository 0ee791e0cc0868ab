// request_args(): a Request as kvplan's command-line arguments, the flags of cli/main.cpp (the llama.cpp names
// where kvplan has them). What a suggestion carries so a script can re-run it; tests check the round trip.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kvplan/plan.hpp"

namespace kvplan {

namespace {

std::string size_arg(Bytes b) { return b % kMiB == 0 ? fmt::format("{}MiB", b / kMiB) : fmt::format("{}", b); }

}  // namespace

std::vector<std::string> request_args(const Request& r) {
  std::vector<std::string> a;
  auto put = [&](const std::string& flag, const std::string& value) { a.push_back(flag), a.push_back(value); };
  auto put_int = [&](const std::string& flag, const std::optional<int>& v) { if (v) put(flag, std::to_string(*v)); };
  auto put_str = [&](const std::string& flag, const std::optional<std::string>& v) { if (v) put(flag, *v); };
  auto flag = [&](const std::string& f, bool on) { if (on) a.push_back(f); };
  put("--gpu", r.gpu);
  for (const auto& g : r.extra_gpus) put("--gpu", g);
  if (!r.rpc_servers.empty()) {
    std::string joined;
    for (const auto& rpc : r.rpc_servers) joined += (joined.empty() ? "" : ",") + rpc;
    put("--rpc", joined);
  }
  put("--model", r.model_spec && r.model_spec->remote           ? r.model_spec->remote->id
                 : r.model_spec && !r.model_spec->file_paths.empty() ? r.model_spec->file_paths.front()
                                                                     : r.model);
  put("--task", r.task);
  if (r.engine != "llama.cpp") put("--engine", r.engine);
  put_str("--backend", r.backend);
  if (r.build != "default") put("--build", r.build);
  put_str("--weights", r.weights);
  put_int("--ctx-size", r.ctx_size);
  put_str("--cache-type-k", r.cache_type_k);
  put_str("--cache-type-v", r.cache_type_v);
  if (r.flash_attn != "auto") put("--flash-attn", r.flash_attn);
  if (r.n_parallel != 1) put("--parallel", std::to_string(r.n_parallel));
  if (r.tensor_parallel != 1) put("--tensor-parallel-size", std::to_string(r.tensor_parallel));
  if (r.pipeline_parallel != 1) put("--pipeline-parallel-size", std::to_string(r.pipeline_parallel));
  if (r.data_parallel != 1) put("--data-parallel-size", std::to_string(r.data_parallel));
  flag("--enable-expert-parallel", r.expert_parallel);
  if (r.nodes != 1) put("--nodes", std::to_string(r.nodes));
  if (!r.interconnect.empty()) put("--interconnect", r.interconnect);
  put_int("--max-num-seqs", r.max_num_seqs);
  if (r.concurrency != 1) put("--concurrency", std::to_string(r.concurrency));
  put_int("--max-num-batched-tokens", r.max_batched_tokens);
  flag("--kv-unified", r.kv_unified);
  put_int("--ubatch-size", r.n_ubatch);
  put_int("--batch-size", r.n_batch);
  if (r.program != "llama-server") put("--program", r.program);
  put_int("--n-outputs-max", r.n_outputs_max);
  flag("--swa-full", r.swa_full);
  flag("--allow-slow", r.allow_slow);
  put_int("--n-gpu-layers", r.n_gpu_layers);
  if (r.n_cpu_moe) *r.n_cpu_moe < 0 ? a.push_back("--cpu-moe") : put("--n-cpu-moe", std::to_string(*r.n_cpu_moe));
  for (const auto& ot : r.override_tensors) put("--override-tensor", ot);
  if (!r.tensor_split.empty()) {
    std::string ts;
    for (double v : r.tensor_split) ts += (ts.empty() ? "" : ",") + fmt::format("{:g}", v);
    put("--tensor-split", ts);
  }
  if (r.split_mode != "layer") put("--split-mode", r.split_mode);
  if (r.fit_placement) put("--fit", "on");
  put_int("--fit-target", r.fit_target_mib);
  put_str("--rope-scaling", r.rope_scaling);
  if (r.rope_scale) put("--rope-scale", fmt::format("{:g}", *r.rope_scale));
  put_int("--yarn-orig-ctx", r.yarn_orig_ctx);
  if (r.reserve) put("--reserve", size_arg(*r.reserve));
  if (r.free) put("--free", size_arg(*r.free));
  if (!r.free_per_gpu.empty()) put("--free", "auto");  // several GPUs' free memory has no one-value spelling
  // RAM kvplan read from this machine (or KVPLAN_RAM) is read again when the command runs: no bytes figure to retype
  if (r.host_ram && (r.host_ram_source.empty() || r.host_ram_source == "--ram")) put("--ram", size_arg(*r.host_ram));
  if (r.host_bandwidth_gbs) put("--ram-bandwidth", fmt::format("{:g}", *r.host_bandwidth_gbs));
  if (!r.model_draft.empty() || r.model_draft_spec)
    put("--model-draft", r.model_draft_spec && !r.model_draft_spec->file_paths.empty() ? r.model_draft_spec->file_paths.front() : r.model_draft);
  put_str("--weights-draft", r.weights_draft);
  put_str("--cache-type-k-draft", r.cache_type_k_draft);
  put_str("--cache-type-v-draft", r.cache_type_v_draft);
  put_int("--n-gpu-layers-draft", r.n_gpu_layers_draft);
  put_int("--draft-max", r.draft_max);
  if (r.mmproj) put("--mmproj", r.mmproj->path);
  flag("--no-mmproj-offload", r.mmproj && !r.mmproj_offload);
  if (r.top != 5) put("--top", std::to_string(r.top));
  flag("--max-ctx", r.max_ctx);
  flag("--accept-risk", r.accept_risk);
  if (!r.server_args.empty()) {  // the tail of a pasted line: kvplan reads what follows "llama-server" as its flags
    a.push_back("llama-server");
    a.insert(a.end(), r.server_args.begin(), r.server_args.end());
  }
  return a;
}

}  // namespace kvplan

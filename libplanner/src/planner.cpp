// plan(): resolve → enumerate → account → fit → score → rank. Pure: the same catalog and request
// always give the same plan.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <array>
#include <map>
#include <tuple>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "engines/llama_cpp.hpp"
#include "engines/runtimes.hpp"
#include "kvplan/error.hpp"
#include "kvplan/memory.hpp"
#include "kvplan/plan.hpp"
#include "priors/prior.hpp"

namespace kvplan {

const char* risk_name(Risk r) {
  switch (r) {
    case Risk::free: return "free";
    case Risk::mild: return "mild";
    case Risk::noticeable: return "noticeable";
    case Risk::avoid: return "avoid";
  }
  return "?";
}

Bytes Option::sum(const std::string& what, const std::string& pool) const {
  Bytes b = 0;
  for (const auto& a : allocations)
    if (a.what == what && (pool.empty() || a.pool == pool)) b += a.figure.bytes;
  return b;
}
const PoolUsage& Option::usage(const std::string& pool) const {
  for (const auto& p : pools)
    if (p.pool == pool) return p;
  throw std::out_of_range("no pool " + pool);
}
Bytes Option::device_total() const {
  Bytes t = 0;
  for (const auto& u : pools)
    if (u.pool != "host") t += u.total;
  return t;
}
Bytes Option::device_headroom() const {
  Bytes h = pools.front().headroom;
  for (const auto& u : pools)
    if (u.pool != "host") h = std::min(h, u.headroom);
  return h;
}
bool Option::fits() const {
  return std::all_of(pools.begin(), pools.end(), [](const PoolUsage& p) { return p.headroom >= 0; });
}

namespace {

// A pool's KV allocations under their JSON names (the main model and a draft list them alike).
template <class Put>
void put_kv_parts(const KvCacheBytes& k, const std::string& pool, Put& put) {
  put("k_cache", pool, k.k);
  put("v_cache", pool, k.v);
  put("swa_k_cache", pool, k.swa_k);
  put("swa_v_cache", pool, k.swa_v);
  put("state", pool, k.state);
}

constexpr int kMinCtx = 256;

// Everything about the request that does not depend on the option.
struct Setup {
  const Catalog* catalog = nullptr;
  const EngineSpec* engine = nullptr;    // llama.cpp's rules: its memory model, and the architecture table for every engine
  const RuntimeProfile* runtime = nullptr;  // another engine (nullptr: llama.cpp itself)
  bool own_memory = false;               // the runtime sizes memory itself (all but Ollama, which runs llama.cpp)
  int activation_tokens = 0;             // the batch the runtime sizes activations for
  const BackendSpec* backend = nullptr;
  const ModelSpec* model = nullptr;
  const TaskProfile* task = nullptr;
  const GpuSpec* gpu = nullptr;
  Request request;
  Resolved resolved;
  std::vector<Pool> pools;
  std::string device_pool, host_pool;
  std::vector<std::string> gpu_pools;  // gpu0, gpu1, … (empty for unified memory and the CPU)
  std::map<std::string, double> pool_bandwidth;  // GB/s per pool (the catalog GPU's; host: --ram-bandwidth or 60)
  std::map<std::string, double> pool_tflops;     // FP16 tensor TFLOPS per GPU pool (catalog)
  int ctx_allowed = 0;     // the longest context the plan may use (native, or rope-scaled)
  bool rotation_rule = false;
  WeightFormat file_format;  // a GGUF's own format when it is not in the catalog (quality unknown)
  Placement placement;       // which layers and experts live on the GPU
  struct Draft {             // speculative decoding: the draft model and its context's settings
    const ModelSpec* model = nullptr;
    const WeightFormat* catalog_format = nullptr;  // nullptr: the file's own (file_format)
    WeightFormat file_format;
    Placement placement;
    std::string type_k = "f16", type_v = "f16";
    const WeightFormat& format() const { return catalog_format ? *catalog_format : file_format; }
  };
  std::optional<Draft> draft;
  std::vector<std::string> warnings;  // plan-level notes found while resolving

  // compute_bytes depends on the shape and the cache types, not on the weight format: the ranker asks for the same
  // figure once per format, and on the CPU backend each is a reserve graph built and placed (docs/benchmarks.md).
  using ComputeKey = std::tuple<const ModelSpec*, const BackendSpec*, std::array<int, 9>, std::string, std::string, bool, bool>;
  mutable std::map<ComputeKey, ComputeBytes> compute_memo;
  ComputeBytes compute(const ModelSpec& m, const ContextShape& sh, const GgmlType& tk, const GgmlType& tv, bool fa,
                       const BackendSpec& b, bool holds_output = true) const {
    const std::array<int, 9> dims{sh.n_ctx, sh.n_ctx_seq, sh.n_stream, sh.n_seq, sh.unified ? 1 : 0, sh.n_ubatch, sh.n_batch,
                                  sh.swa_cells, sh.n_outputs};
    const ComputeKey key{&m, &b, dims, tk.name, tv.name, fa, holds_output};
    auto it = compute_memo.find(key);
    if (it == compute_memo.end()) it = compute_memo.emplace(key, compute_bytes(m, *engine, sh, tk, tv, fa, b, holds_output)).first;
    return it->second;
  }
};

struct Candidate {  // one (weights, K, V, flash attention) combination the engine accepts
  const WeightFormat* weights = nullptr;
  std::string k, v;
  bool flash_attn = true;
  bool slow = false;
  std::vector<std::string> needs;
  std::string slow_reason;
  WeightBytes weight_bytes;
};

bool is_size(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.');
}

struct Device {  // one GPU of the request
  const GpuSpec* gpu = nullptr;  // nullptr: a bare size
  Bytes total = 0;
  std::string name;
};

std::vector<Pool> make_pools(const Setup& s, const Request& r, const std::vector<Device>& devices) {
  std::vector<Pool> pools;
  // One pool when the device shares memory with the host: unified memory, or the CPU backend itself.
  const bool cpu = s.backend->id == "cpu";
  const bool shared = cpu || (s.gpu && s.gpu->unified()) || s.backend->id == "metal";
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    Pool dev;
    dev.id = cpu ? "cpu" : shared ? "unified" : fmt::format("gpu{}", i);
    dev.kind = cpu ? "cpu" : shared ? "unified" : "gpu";
    dev.device = d.name;
    dev.backend = s.backend->id;
    dev.capacity = r.free ? *r.free : d.total;
    dev.reserve = r.reserve.value_or(0);
    dev.overhead = runtime_overhead(d.gpu, *s.backend);
    dev.margin = s.engine->margin_mib * kMiB;
    if (s.runtime) {
      dev.margin = s.runtime->margin_mib * kMiB;
      if (s.own_memory)
        dev.overhead = Figure::estimate(static_cast<Bytes>(s.runtime->context.typical * kMiB), static_cast<Bytes>(s.runtime->context.high * kMiB));
      // vLLM / SGLang use a fraction of TOTAL memory; the rest is not theirs to fill.
      if (s.own_memory && !s.runtime->fraction_covers_activations) dev.overhead = {};  // in the share left outside the fraction
      if (s.runtime->memory_fraction > 0)
        dev.reserve += static_cast<Bytes>(std::llround(static_cast<double>(d.total) * (1 - s.runtime->memory_fraction)));
    }
    if (dev.budget() <= 0)
      throw InputError(r.free ? "--free" : "--reserve", format_size(r.free ? *r.free : dev.reserve),
                       fmt::format("leaves nothing for the plan on {} ({} after runtime overhead and margin)", d.name,
                                   format_size(dev.budget())));
    pools.push_back(dev);
  }
  if (!shared) {
    Pool host;
    host.id = "host";
    host.kind = "host";
    host.device = "host RAM";
    host.backend = "cpu";
    host.capacity = r.host_ram.value_or(0);
    pools.push_back(host);
  }
  return pools;
}

// A pasted GGUF name ("Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf") names the model and the weight format.
void split_gguf_name(const Catalog& c, std::string& model, std::optional<std::string>& weights, const std::string& weights_flag) {
  const std::string ext = ".gguf";
  const std::string m = model;
  if (m.size() <= ext.size() || m.compare(m.size() - ext.size(), ext.size(), ext) != 0) return;
  const std::string stem = m.substr(0, m.size() - ext.size());
  for (const auto& f : c.weight_formats) {
    const std::string suffix = "-" + f.id;
    if (stem.size() > suffix.size() && stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0) {
      if (weights && *weights != f.id)
        throw InputError(weights_flag, *weights, "disagrees with the file name '" + m + "' (" + f.id + ")");
      model = stem.substr(0, stem.size() - suffix.size());
      weights = f.id;
      return;
    }
  }
  model = stem;
}

// -ngl and the rope flags must describe what kvplan models: full offload, the model's documented scaling.
void check_model_flags(const ModelSpec& m, const Request& r) {
  if (r.n_gpu_layers && *r.n_gpu_layers < -1)
    throw InputError("--n-gpu-layers", std::to_string(*r.n_gpu_layers), "must be a layer count, or -1 for all");
  if (r.n_cpu_moe && !m.moe)
    throw InputError(*r.n_cpu_moe < 0 ? "--cpu-moe" : "--n-cpu-moe", *r.n_cpu_moe < 0 ? "" : std::to_string(*r.n_cpu_moe),
                     m.name + " has no experts to keep in RAM");
  if (!r.rope_scaling && !r.rope_scale && !r.yarn_orig_ctx) return;
  const std::string given = r.rope_scaling.value_or("");
  if (!m.rope_scaling) throw InputError("--rope-scaling", given, m.name + " has no documented rope scaling in the catalog");
  if (r.rope_scaling && *r.rope_scaling != m.rope_scaling->type)
    throw InputError("--rope-scaling", given, "does not match " + m.name + "'s documented scaling", {m.rope_scaling->type});
  if (r.rope_scale && *r.rope_scale != m.rope_scaling->factor)
    throw InputError("--rope-scale", fmt::format("{:g}", *r.rope_scale), "does not match " + m.name + "'s documented factor",
                     {fmt::format("{:g}", m.rope_scaling->factor)});
  if (r.yarn_orig_ctx && *r.yarn_orig_ctx != m.rope_scaling->orig_ctx)
    throw InputError("--yarn-orig-ctx", std::to_string(*r.yarn_orig_ctx), "does not match " + m.name + "'s original context",
                     {std::to_string(m.rope_scaling->orig_ctx)});
}

// The cache type names the engine accepts (-ctk/-ctv take them for every engine).
std::vector<std::string> cache_type_ids(const Setup& s) {
  if (!s.runtime) return s.engine->cache_types;
  std::vector<std::string> ids;
  for (const auto& t : s.runtime->cache_types) ids.push_back(t.id);
  return ids;
}

// What another engine cannot be told: one cache type for K and V where it has one, and llama.cpp's
// own flags where the engine has no equivalent (an error, never silently dropped).
void check_runtime_request(const RuntimeProfile& rt, Request& r) {
  if (rt.same_type_kv) {
    std::vector<std::string> ids;
    for (const auto& t : rt.cache_types) ids.push_back(t.id + "/" + t.id);
    if (r.cache_type_k && r.cache_type_v && *r.cache_type_k != *r.cache_type_v)
      throw InputError("--cache-type-k/--cache-type-v", *r.cache_type_k + "/" + *r.cache_type_v,
                       rt.name + " has one cache type for K and V", ids);
    if (r.cache_type_k && !r.cache_type_v) r.cache_type_v = r.cache_type_k;
    if (r.cache_type_v && !r.cache_type_k) r.cache_type_k = r.cache_type_v;
  }
  if (rt.kind == "ollama") {
    if (r.kv_unified) throw InputError("--kv-unified", "", "Ollama starts llama-server with -np and never --kv-unified: each slot has its own cache");
    if (r.n_cpu_moe || !r.override_tensors.empty())
      throw InputError(r.n_cpu_moe ? "--cpu-moe/--n-cpu-moe" : "--override-tensor", "",
                       "Ollama has no setting that passes it to llama-server (llm/llama_server.go); only num_gpu (-ngl) places layers");
    return;
  }
  auto refuse = [&](bool given, const std::string& flag) {
    if (given) throw InputError(flag, "", "is a llama.cpp flag; " + rt.name + " has no equivalent in kvplan's plan (see `kvplan engines`)");
  };
  refuse(r.n_gpu_layers.has_value(), "--n-gpu-layers");
  refuse(r.n_cpu_moe.has_value(), "--cpu-moe/--n-cpu-moe");
  refuse(r.swa_full, "--swa-full");
  refuse(r.kv_unified, "--kv-unified");
  refuse(r.n_ubatch.has_value(), "--ubatch-size");
  refuse(r.n_batch.has_value(), "--batch-size");
  refuse(r.flash_attn != "auto", "--flash-attn");
  refuse(r.build != "default", "--build");
  refuse(r.allow_slow, "--allow-slow");
  refuse(r.rope_scaling || r.rope_scale || r.yarn_orig_ctx, "--rope-scaling");
  if (r.model_spec && !r.model_spec->file_tensors.empty())
    throw InputError("--model", r.model, "is a GGUF file, which " + rt.name + " does not load; give the catalog model name");
}

// What an engine that sizes its own memory accepts as a K/V pair (data/engines/<id>.yaml rules).
engines::PairCheck check_runtime_pair(const Setup& s, const std::string& k, const std::string& v) {
  const RuntimeProfile& rt = *s.runtime;
  const RuntimeCacheType* tk = rt.cache_type(k);
  const RuntimeCacheType* tv = rt.cache_type(v);
  engines::PairCheck out;
  if (!tk || !tv) {
    out.reason = "unknown cache type for " + rt.name;
  } else if (rt.same_type_kv && k != v) {
    out.reason = rt.name + " has one cache type for K and V";
  } else if (!rt.mix_unquantized && tk->quantized() != tv->quantized()) {
    out.reason = fmt::format("{} caches are FP16 for both K and V or quantized for both (cache_mode \"k_bits,v_bits\")", rt.name);
  } else if (!rt.quantized_sliding && (tk->quantized() || tv->quantized()) && layer_counts(*s.model).sliding > 0) {
    out.reason = fmt::format("{} keeps sliding-window layers in a rotating cache, which cannot be quantized", rt.name);
  } else {
    out.ok = true;
  }
  return out;
}

// The draft model of speculative decoding: llama-server loads it with the main context's parameters, its own
// cache types (-ctkd/-ctvd, default f16) and layers (-ngld) (common/speculative.cpp
// common_base_params_to_speculative), and refuses a vocabulary that differs from the target's by more than
// 128 tokens (common_speculative_are_compatible, SPEC_VOCAB_MAX_SIZE_DIFFERENCE).
void resolve_draft(const Catalog& c, Setup& s) {
  const Request& r = s.request;
  const std::string name = r.model_draft_spec ? r.model_draft_spec->name : r.model_draft;
  if (s.runtime) throw InputError("--model-draft", name, "speculative decoding is planned for llama.cpp only, not " + s.runtime->name);
  Setup::Draft d;
  d.model = r.model_draft_spec ? r.model_draft_spec.get() : &c.model(r.model_draft, "--model-draft");
  if (!s.engine->arch(d.model->arch))
    throw InputError("--model-draft", name, fmt::format("architecture '{}' is not modelled yet", d.model->arch));
  if (std::abs(d.model->vocab - s.model->vocab) > 128)
    throw InputError("--model-draft", name,
                     fmt::format("has {} vocabulary tokens against {}'s {}: llama.cpp refuses a draft whose vocabulary differs by more "
                                 "than 128 ('draft model vocab type must match target model')", d.model->vocab, s.model->name, s.model->vocab));
  if (!d.model->file_tensors.empty()) {
    if (r.weights_draft && *r.weights_draft != d.model->file_format)
      throw InputError("--weights-draft", *r.weights_draft, "disagrees with the draft file, which is " + d.model->file_format);
    d.file_format.id = d.model->file_format;
    d.catalog_format = c.find_weight_format(d.model->file_format);
  } else {
    if (!r.weights_draft) s.warnings.push_back(fmt::format("draft weights assumed Q8_0 (give --weights-draft or the draft's GGUF file)"));
    d.catalog_format = &c.weight_format(r.weights_draft.value_or("Q8_0"), "--weights-draft");
  }
  for (const auto* t : {&r.cache_type_k_draft, &r.cache_type_v_draft})
    if (*t && std::find(s.engine->cache_types.begin(), s.engine->cache_types.end(), **t) == s.engine->cache_types.end())
      throw InputError(t == &r.cache_type_k_draft ? "--cache-type-k-draft" : "--cache-type-v-draft", **t, "unknown cache type",
                       s.engine->cache_types, closest_match(**t, s.engine->cache_types));
  d.type_k = r.cache_type_k_draft.value_or("f16");
  d.type_v = r.cache_type_v_draft.value_or("f16");
  if (r.n_gpu_layers_draft && *r.n_gpu_layers_draft < -1)
    throw InputError("--n-gpu-layers-draft", std::to_string(*r.n_gpu_layers_draft), "must be a layer count, or -1 for all");
  if (r.draft_max && (*r.draft_max < 1 || *r.draft_max > 256))
    throw InputError("--draft-max", std::to_string(*r.draft_max), "must be 1..256");
  d.placement = Placement::for_request(*d.model, r.n_gpu_layers_draft, std::nullopt, s.engine->rule_holds("ngl_counts_output"));
  s.resolved.draft_file = r.model_draft_spec && !r.model_draft_spec->file_paths.empty() ? r.model_draft_spec->file_paths.front()
                                                                                        : engines::gguf_file_name(*d.model, d.format().id);
  s.resolved.draft_weights = d.format().id;
  s.resolved.draft_type_k = d.type_k;
  s.resolved.draft_type_v = d.type_v;
  s.resolved.n_gpu_layers_draft = r.n_gpu_layers_draft;
  s.resolved.draft_max = r.draft_max.value_or(3);  // common_params_speculative_draft::n_max
  s.draft = d;
}

Setup resolve(const Catalog& c, const Request& request) {
  Setup s;
  s.catalog = &c;
  s.request = request;
  split_gguf_name(c, s.request.model, s.request.weights, "--weights");
  if (!s.request.model_draft.empty()) split_gguf_name(c, s.request.model_draft, s.request.weights_draft, "--weights-draft");
  const Request& r = s.request;
  if (r.model.empty()) throw InputError("--model", "", "is required (a catalog name such as qwen2.5-coder-32b)");
  if (r.gpu.empty()) throw InputError("--gpu", "", "is required (a GPU name such as rtx4090, or a size such as 24GB)");
  s.runtime = c.runtime(r.engine);
  s.engine = s.runtime ? &c.engines.front() : &c.engine(r.engine);
  s.own_memory = s.runtime && s.runtime->kind != "ollama";
  if (s.runtime) check_runtime_request(*s.runtime, s.request);
  s.model = r.model_spec ? r.model_spec.get() : &c.model(s.request.model);
  s.file_format.id = s.model->file_format;
  s.file_format.quality_source = "";
  s.file_format.rel_loss_estimate = true;  // not a catalog format: no measured loss
  if (r.model_spec && r.weights && !r.model_spec->file_format.empty() && *r.weights != r.model_spec->file_format &&
      !r.model_spec->file_tensors.empty())
    throw InputError("--weights", *r.weights, "disagrees with the file, which is " + r.model_spec->file_format);
  check_model_flags(*s.model, r);
  s.placement = Placement::for_request(*s.model, r.n_gpu_layers, r.n_cpu_moe, s.engine->rule_holds("ngl_counts_output"));
  if (const auto* rule = s.engine->arch(s.model->arch); rule && ((rule->mla && !s.model->mla) || (!rule->recurrent.empty() && !s.model->recurrent)))
    throw InputError("--model", r.model,
                     fmt::format("architecture '{}' needs its {} fields, which this model entry lacks; kvplan refuses rather than guess",
                                 s.model->arch, rule->mla ? "MLA (mla: kv_lora_rank, rope_dim)" : "recurrent-state (recurrent: …)"));
  if (!s.engine->arch(s.model->arch)) {
    std::vector<std::string> archs;
    for (const auto& [name, rule] : s.engine->archs) archs.push_back(name);
    const auto why = s.engine->unmodelled_archs.find(s.model->arch);
    throw InputError("--model", r.model,
                     fmt::format("architecture '{}' is not modelled yet ({}); kvplan refuses rather than guess with the plain "
                                 "attention formula", s.model->arch,
                                 why != s.engine->unmodelled_archs.end() ? why->second : "unknown to kvplan"),
                     archs);
  }
  s.task = &c.task(r.task);
  if (!r.model_draft.empty() || r.model_draft_spec) resolve_draft(c, s);
  else if (r.weights_draft || r.cache_type_k_draft || r.cache_type_v_draft || r.n_gpu_layers_draft || r.draft_max)
    throw InputError("--model-draft", "", "is missing: the draft flags (--weights-draft, -ctkd, -ctvd, -ngld, --draft-max) need a draft model");
  if (r.mmproj && s.own_memory) throw InputError("--mmproj", r.mmproj->path, "vision projectors are planned for llama.cpp only");
  if (r.mmproj) {
    s.resolved.mmproj_file = r.mmproj->path;
    s.resolved.mmproj_offload = r.mmproj_offload;
  }
  if (r.n_parallel < 1 || r.n_parallel > 256) throw InputError("--parallel", std::to_string(r.n_parallel), "must be 1..256");
  if (r.tensor_parallel != 1) {
    // Tensor parallelism: vLLM and SGLang split heads over identical GPUs (multi-GPU llama.cpp is not modelled).
    if (!s.runtime || (s.runtime->kind != "vllm" && s.runtime->kind != "sglang"))
      throw InputError("--tensor-parallel-size", std::to_string(r.tensor_parallel), "is planned for --engine vllm and sglang only",
                       {"vllm", "sglang"});
    if (r.tensor_parallel < 1 || r.tensor_parallel > 64 || s.model->heads % r.tensor_parallel != 0)
      throw InputError("--tensor-parallel-size", std::to_string(r.tensor_parallel),
                       fmt::format("must divide {}'s {} attention heads (vLLM: 'Total number of attention heads must be "
                                   "divisible by tensor parallel size')", s.model->name, s.model->heads));
  }
  if (r.top < 1) throw InputError("--top", std::to_string(r.top), "must be at least 1");
  if (r.flash_attn != "on" && r.flash_attn != "off" && r.flash_attn != "auto")
    throw InputError("--flash-attn", r.flash_attn, "unknown value", {"on", "off", "auto"}, closest_match(r.flash_attn, {"on", "off", "auto"}));
  if (r.build != "default" && r.build != "fa-all-quants")
    throw InputError("--build", r.build, "unknown build", {"default", "fa-all-quants"}, closest_match(r.build, {"default", "fa-all-quants"}));
  const int ub = r.n_ubatch.value_or(s.engine->default_ubatch);
  const int b = r.n_batch.value_or(s.engine->default_batch);
  if (ub < 1 || ub > 65536) throw InputError("--ubatch-size", std::to_string(ub), "must be 1..65536");
  if (b < 1 || b > 1 << 20) throw InputError("--batch-size", std::to_string(b), "must be 1..1048576");
  const std::vector<std::string> accepted = cache_type_ids(s);
  const std::string engine_name = s.runtime ? s.runtime->name : s.engine->name;
  for (const auto* t : {&r.cache_type_k, &r.cache_type_v}) {
    if (!*t) continue;
    const std::string field = t == &r.cache_type_k ? "--cache-type-k" : "--cache-type-v";
    if (std::find(accepted.begin(), accepted.end(), **t) == accepted.end())
      throw InputError(field, **t, "unknown cache type for " + engine_name, accepted, closest_match(**t, accepted));
  }

  // Devices: "--gpu 2x24GB" or --gpu repeated; each a catalog GPU or a bare size.
  std::vector<std::string> specs;
  for (const std::string& g : [&] { std::vector<std::string> all = {r.gpu}; all.insert(all.end(), r.extra_gpus.begin(), r.extra_gpus.end()); return all; }()) {
    const auto x = g.find('x');
    int count = 1;
    if (x != std::string::npos && x > 0 && x < 3 && std::all_of(g.begin(), g.begin() + static_cast<long>(x), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      count = std::stoi(g.substr(0, x));
      if (count < 1 || count > 16) throw InputError("--gpu", g, "a device count must be 1..16 (2x24GB)");
      for (int i = 0; i < count; ++i) specs.push_back(g.substr(x + 1));
    } else {
      specs.push_back(g);
    }
  }
  s.request.gpu = specs.front();
  const bool several = specs.size() > 1;
  if (several && s.runtime)
    throw InputError("--gpu", r.gpu, s.runtime->kind == "vllm" || s.runtime->kind == "sglang"
                                         ? s.runtime->name + " splits a model with --tensor-parallel-size over identical GPUs"
                                         : "several GPUs are planned for llama.cpp (and vLLM/SGLang tensor parallelism) only");
  if (several && r.free) throw InputError("--free", format_size(*r.free), "applies to one GPU; with several give --reserve");
  if (r.split_mode != "layer" && r.split_mode != "none")
    throw InputError("--split-mode", r.split_mode,
                     r.split_mode == "row"    ? "llama.cpp b10454 refuses row split on CUDA and ROCm: their backend no longer offers a split "
                                                "buffer type ('device CUDA0 does not support split buffers', llama-model.cpp "
                                                "make_gpu_buft_list); SYCL's is not modelled"
                     : r.split_mode == "tensor" ? "tensor split (EXPERIMENTAL in llama.cpp b10454) is not modelled"
                                                : "unknown split mode",
                     {"layer", "none"});
  if (!r.tensor_split.empty() && r.tensor_split.size() != specs.size())
    throw InputError("--tensor-split", fmt::format("{} values", r.tensor_split.size()), fmt::format("needs one value per GPU ({})", specs.size()));
  if (std::any_of(r.tensor_split.begin(), r.tensor_split.end(), [](double v) { return !std::isfinite(v) || v < 0; }) ||
      (!r.tensor_split.empty() && std::all_of(r.tensor_split.begin(), r.tensor_split.end(), [](double v) { return v == 0; })))
    throw InputError("--tensor-split", "", "needs non-negative proportions, not all zero");
  if (r.split_mode == "none") specs.resize(1);  // llama.cpp uses the main GPU alone

  Bytes total = 0;
  std::string device_name;
  if (is_size(s.request.gpu)) {
    total = parse_size(r.gpu, "--gpu");
    const bool apple = s.runtime && s.runtime->kind == "mlx";
    s.backend = &s.engine->backend(r.backend.value_or(apple ? "metal" : "cuda"));
    device_name = fmt::format("{} GPU ({} GiB, {})", r.gpu, format_gib(total),
                              r.backend ? *r.backend : apple ? "assumed Apple unified memory" : "assumed CUDA");
    s.resolved.gpu_size_only = true;
  } else {
    s.gpu = &c.gpu(r.gpu);
    s.backend = &s.engine->backend(r.backend.value_or(s.gpu->backend));
    total = s.gpu->unified() && s.gpu->working_set_mib > 0 ? s.gpu->working_set_mib * kMiB : s.gpu->total_mib * kMiB;
    device_name = s.gpu->name;
  }
  if (s.runtime && std::find(s.runtime->backends.begin(), s.runtime->backends.end(), s.backend->id) == s.runtime->backends.end())
    throw InputError(r.backend ? "--backend" : "--gpu", r.backend ? *r.backend : r.gpu,
                     fmt::format("{} does not run on the {} backend", s.runtime->name, s.backend->name), s.runtime->backends);
  if (r.reserve && *r.reserve < 0) throw InputError("--reserve", format_size(*r.reserve), "must not be negative");
  if (r.free && *r.free > total)
    throw InputError("--free", format_size(*r.free), fmt::format("is more than the device's {}", format_size(total)));
  if (r.tensor_parallel > 1) device_name = fmt::format("{} x {} (tensor parallel; figures per GPU)", r.tensor_parallel, device_name);
  std::vector<Device> devices = {{s.gpu, total, device_name}};
  for (size_t i = 1; i < specs.size(); ++i) {
    Device d;
    if (is_size(specs[i])) {
      d.total = parse_size(specs[i], "--gpu");
      d.name = fmt::format("{} GPU ({} GiB)", specs[i], format_gib(d.total));
    } else {
      d.gpu = &c.gpu(specs[i]);
      if (d.gpu->unified() || d.gpu->backend != s.backend->id)
        throw InputError("--gpu", specs[i], fmt::format("cannot join {} ({} backend) in one llama.cpp process", devices.front().name, s.backend->name));
      d.total = d.gpu->total_mib * kMiB;
      d.name = d.gpu->name;
    }
    devices.push_back(d);
  }
  if (devices.size() > 1 && (s.backend->id == "cpu" || s.backend->id == "metal" || (s.gpu && s.gpu->unified())))
    throw InputError("--gpu", r.gpu, "several devices need discrete GPUs");
  s.pools = make_pools(s, r, devices);
  for (size_t i = 0; i < devices.size() && i < s.pools.size(); ++i)
    if (devices[i].gpu && devices[i].gpu->bandwidth_gbs > 0) s.pool_bandwidth[s.pools[i].id] = devices[i].gpu->bandwidth_gbs;
  for (size_t i = 0; i < devices.size() && i < s.pools.size(); ++i)
    if (devices[i].gpu && devices[i].gpu->fp16_tflops > 0) s.pool_tflops[s.pools[i].id] = devices[i].gpu->fp16_tflops;
  if (r.host_bandwidth_gbs && *r.host_bandwidth_gbs <= 0)
    throw InputError("--ram-bandwidth", fmt::format("{:g}", *r.host_bandwidth_gbs), "must be GB/s, above 0");
  if (s.pools.back().kind == "host") s.pool_bandwidth["host"] = r.host_bandwidth_gbs.value_or(60);  // dual-channel DDR5-4800: 76.8 GB/s peak
  s.device_pool = s.pools.front().id;
  s.host_pool = s.pools.back().kind == "host" ? s.pools.back().id : s.pools.front().id;
  for (const auto& p : s.pools)
    if (p.kind == "gpu") s.gpu_pools.push_back(p.id);

  // -ot PATTERN=DEVICE: the device names llama.cpp's buffer types carry (CPU, CUDA0, ROCm0, Vulkan0, SYCL0).
  const std::string prefix = s.backend->id == "cuda" ? "CUDA" : s.backend->id == "rocm" ? "ROCm" : s.backend->id == "vulkan" ? "Vulkan"
                             : s.backend->id == "sycl" ? "SYCL" : "";
  for (const auto& ot : r.override_tensors) {
    if (s.own_memory) throw InputError("--override-tensor", ot, "is a llama.cpp flag; " + s.runtime->name + " has no equivalent");
    const auto eq = ot.rfind('=');
    std::vector<std::string> names = {"CPU"};
    for (size_t i = 0; i < devices.size() && !prefix.empty(); ++i) names.push_back(prefix + std::to_string(i));
    if (eq == std::string::npos || eq == 0) throw InputError("--override-tensor", ot, "needs PATTERN=DEVICE, e.g. exps=CPU", names);
    const std::string pattern = ot.substr(0, eq), device = ot.substr(eq + 1);
    try {
      (void)std::regex(pattern);
    } catch (const std::regex_error& e) {
      throw InputError("--override-tensor", ot, std::string("is not a valid regular expression: ") + e.what());
    }
    const auto it = std::find(names.begin(), names.end(), device);
    if (it == names.end()) throw InputError("--override-tensor", ot, "names no device of this plan", names, closest_match(device, names));
    s.placement.overrides.emplace_back(pattern, static_cast<int>(it - names.begin()) - 1);
    s.resolved.override_tensors.push_back(ot);
  }
  if (devices.size() > 1) {
    // llama.cpp splits layers by free memory unless told (load_tensors); kvplan states the split it planned
    // with on the launch line (-ts), so the engine's free-memory reading at start-up cannot move it.
    std::vector<double> weights = r.tensor_split;
    if (weights.empty())
      for (size_t i = 0; i < devices.size(); ++i)
        weights.push_back(static_cast<double>((s.pools[i].capacity - s.pools[i].reserve) / kMiB));
    s.placement.split(weights);
    s.resolved.tensor_split = weights;
    s.resolved.pipeline_parallel = s.placement.first_gpu_layer == 0 && s.placement.output_on_gpu;
    if (s.draft) s.resolved.draft_device = prefix + "0";
  }
  s.resolved.engine = s.engine->name;
  s.resolved.engine_build = s.engine->build_name + ", as vendored by " + s.engine->vendored_by;
  if (s.runtime) {
    s.resolved.engine = s.runtime->name;
    s.resolved.engine_id = s.runtime->id;
    s.resolved.engine_build = s.runtime->version + (s.own_memory ? "" : "; memory as llama.cpp " + s.engine->build_name);
    s.resolved.memory_fraction = s.runtime->memory_fraction;
    const bool large = total >= 70 * kGiB && s.runtime->activation_tokens_large > 0;
    s.activation_tokens = large ? s.runtime->activation_tokens_large : s.runtime->activation_tokens;
  }
  s.resolved.backend = s.backend->id;
  s.resolved.backend_verified = s.backend->verified;
  s.resolved.build = r.build;
  s.resolved.n_parallel = r.n_parallel;
  s.resolved.tensor_parallel = r.tensor_parallel;
  s.resolved.kv_unified = r.kv_unified;
  s.resolved.n_ubatch = ub;
  s.resolved.n_batch = b;
  // tools/server/server-context.cpp server_output_limits -> common_speculative_get_output_limits:
  // n_outputs_max = min(n_batch, n_parallel · (1 + n_draft)), n_draft 0 without speculative decoding.
  if (r.n_outputs_max && (*r.n_outputs_max < 1 || *r.n_outputs_max > b))
    throw InputError("--n-outputs-max", std::to_string(*r.n_outputs_max), fmt::format("must be 1..{} (the batch size)", b));
  s.resolved.n_outputs_max = r.n_outputs_max.value_or(std::min(b, r.n_parallel * (1 + s.resolved.draft_max)));
  s.resolved.swa_full = r.swa_full;
  s.resolved.n_gpu_layers = r.n_gpu_layers;
  s.resolved.n_cpu_moe = r.n_cpu_moe;
  // Placement: kvplan's own (-ngl N --fit off), or handed to llama-server's fit (common/fit.cpp), which moves
  // layers only when the user gave no -ngl/overrides and keeps --fit-target MiB free on each device beyond
  // what it measures (weights, KV, compute); the driver context is already outside its free memory, so the
  // target is kvplan's margin plus what fit cannot see (pool growth, BLAS workspace). Ollama always uses fit.
  // Ollama passes -ngl only for a num_gpu parameter; without one llama-server's fit places the layers.
  const bool fit = r.fit_placement || (s.runtime && s.runtime->kind == "ollama" && !r.n_gpu_layers);
  if (fit && s.own_memory) throw InputError("--fit", "on", "is llama-server's placement; " + s.runtime->name + " has none");
  if (fit && (r.n_gpu_layers || r.n_cpu_moe))
    throw InputError("--fit", "on", "an explicit -ngl / --cpu-moe turns llama-server's fit placement off: give one or the other");
  if (fit && !s.own_memory) {
    const Pool& dev = s.pools.front();
    const Bytes unseen = dev.overhead.high - static_cast<Bytes>(s.backend->context.high_mib * kMiB);
    s.resolved.placement = "llama-server --fit";
    s.resolved.fit_target_mib = static_cast<int>((dev.margin + std::max<Bytes>(0, unseen) + kMiB - 1) / kMiB);
    // A given target (the user's, or Ollama's: it passes none, so llama-server's default): fit keeps that much
    // free, so the plan's margin is what the target leaves beyond the part fit cannot see.
    const std::optional<int> target = r.fit_target_mib ? r.fit_target_mib
                                      : s.runtime ? std::optional<int>(static_cast<int>(s.runtime->margin_mib)) : std::nullopt;
    if (target) {
      if (*target < 0) throw InputError("--fit-target", std::to_string(*target), "must be MiB, at least 0");
      s.resolved.fit_target_mib = *target;
      s.pools.front().margin = std::max<Bytes>(0, static_cast<Bytes>(*target) * kMiB - std::max<Bytes>(0, unseen));
    }
  } else if (r.fit_target_mib) {
    throw InputError("--fit-target", std::to_string(*r.fit_target_mib), "is llama-server's fit margin: it needs --fit on");
  }
  s.rotation_rule = s.engine->rule_holds("kv_rotation");

  // Context beyond the native window only when the task wants it or the rope flags were given.
  const ModelSpec& m = *s.model;
  const int slots = r.kv_unified || s.own_memory ? 1 : std::max(1, r.n_parallel);
  const bool rope_flags = r.rope_scaling || r.rope_scale || r.yarn_orig_ctx;
  const bool wants_extension = rope_flags || (r.ctx_size && *r.ctx_size > m.ctx_native * slots) ||
                               (!r.ctx_size && s.task->ctx_target > m.ctx_native);
  s.ctx_allowed = wants_extension && m.ctx_extended > 0 ? m.ctx_extended : m.ctx_native;
  if (r.ctx_size) {
    if (*r.ctx_size < kMinCtx)
      throw InputError("--ctx-size", std::to_string(*r.ctx_size), fmt::format("must be at least {}", kMinCtx));
    if (*r.ctx_size > m.max_ctx() * slots)
      throw InputError("--ctx-size", std::to_string(*r.ctx_size),
                       fmt::format("is beyond {}'s maximum of {} tokens{}", m.name, m.max_ctx(),
                                   m.ctx_extended ? " (with rope scaling)" : ""));
  }
  return s;
}

// The prior's name for an engine's cache type in the K or V role (llama.cpp names are the prior's own).
const std::string& prior_name(const Setup& s, const std::string& id, bool k_role) {
  if (s.runtime)
    if (const auto* t = s.runtime->cache_type(id)) return k_role ? t->prior_k : t->prior_v;
  return id;
}
// Equivalent bits of a cache type in its role (exl2 Q6: K 8-bit, V 4-bit).
double k_bits(const Setup& s, const std::string& id) { return s.catalog->prior.type(prior_name(s, id, true)).k_bits; }
double v_bits(const Setup& s, const std::string& id) { return s.catalog->prior.type(prior_name(s, id, false)).v_bits; }
// Storage bits of K per element, scales included (for describing it).
double k_storage_bits(const Setup& s, const std::string& id) {
  if (s.runtime)
    if (const auto* t = s.runtime->cache_type(id)) return t->k_bytes * 8;
  return s.catalog->prior.type(id).bits;
}

bool uses_rotation(const Setup& s, const std::string& type_k, const std::string& type_v) {
  if (s.own_memory) return false;  // types that rotate carry it in the prior (rotation: builtin)
  const bool quantized = s.engine->type(type_k, "").quantized() || s.engine->type(type_v, "").quantized();
  return s.rotation_rule && quantized && s.model->head_dim_k % 64 == 0;
}

void sum_pools(const Setup& s, Option& o) {
  for (const auto& pool : s.pools) {
    PoolUsage u;
    u.pool = pool.id;
    for (const auto& a : o.allocations)
      if (a.pool == pool.id) u.allocations += a.figure.bytes, u.allocations_high += a.figure.high;
    u.total = u.allocations + pool.overhead.bytes;
    u.total_high = u.allocations_high + pool.overhead.high;
    u.headroom = pool.bounded() ? pool.capacity - pool.reserve - pool.margin - u.total_high : 0;
    o.pools.push_back(u);
  }
}

// An engine that sizes its own memory (data/engines/<id>.yaml, engines/runtimes.hpp): weights from the
// parameter count, KV by the engine's paging for n_parallel conversations of ctx tokens each, its
// temporaries and activations, CUDA graphs. ctx is per conversation.
Option account_runtime(const Setup& s, const Candidate& c, int ctx) {
  const ModelSpec& m = *s.model;
  const RuntimeProfile& rt = *s.runtime;
  const Request& r = s.request;
  const RuntimeCacheType& tk = *rt.cache_type(c.k);
  const RuntimeCacheType& tv = *rt.cache_type(c.v);
  const int seqs = std::max(1, r.n_parallel);
  const int tp = s.resolved.tensor_parallel;
  const KvCacheBytes kv = engines::runtime_kv_bytes(rt, m, *s.engine, tk, tv, ctx, seqs, s.activation_tokens, tp);
  Option o;
  o.weights = c.weights->id;
  o.ctx_size = ctx;
  o.ctx_per_slot = ctx;
  o.cache_type_k = c.k;
  o.cache_type_v = c.v;
  o.flash_attn = true;
  o.beyond_native = ctx > m.ctx_native;
  o.below_task_min = ctx < s.task->ctx_min;
  auto put = [&](const std::string& what, const std::string& pool, const Figure& f) {
    if (f.bytes != 0 || what == "k_cache") o.allocations.push_back({"main", what, pool, f});
  };
  put("weights", s.device_pool, c.weight_bytes.device);
  put("weights_host", s.host_pool, c.weight_bytes.host);
  put("k_cache", s.device_pool, kv.k);
  put("v_cache", s.device_pool, kv.v);
  put("swa_k_cache", s.device_pool, kv.swa_k);
  put("swa_v_cache", s.device_pool, kv.swa_v);
  put("state", s.device_pool, kv.state);
  if (rt.temp_fp16_layer && (tk.quantized() || tv.quantized())) {
    // exllamav2/cache.py footprint(): fp16 K and V of one layer per device for the quantized cache.
    std::int64_t widest = 0;
    for (const auto& lc : layer_caches(m, *s.engine)) widest = std::max(widest, lc.k_width + lc.v_width);
    const Bytes temp = static_cast<Bytes>(widest) * engines::runtime_tokens(rt, m, ctx, 0).full * seqs * 2;
    put("cache_temp", s.device_pool, Figure::exact(temp, temp));
  }
  if (rt.fraction_covers_activations && s.activation_tokens > 0)
    put("compute", s.device_pool, engines::runtime_activation_bytes(m, s.activation_tokens, seqs, tp));
  if (rt.graphs.high > 0)
    put("cuda_graphs", s.device_pool, Figure::estimate(static_cast<Bytes>(rt.graphs.typical * kMiB), static_cast<Bytes>(rt.graphs.high * kMiB)));
  sum_pools(s, o);
  // How many conversations of this length the cache would hold (vLLM's "Maximum concurrency" line):
  // the KV the plan counts plus the device headroom, over one conversation's KV.
  const Bytes kv_all = kv.k.bytes + kv.v.bytes + kv.swa_k.bytes + kv.swa_v.bytes + kv.state.bytes;
  if (kv_all > 0 && o.pools.front().headroom >= 0)
    o.max_concurrency = static_cast<double>(kv_all + o.pools.front().headroom) / (static_cast<double>(kv_all) / seqs);
  return o;
}

// The draft model's own context (component "draft"): the main context's n_ctx, slots, batch and flash
// attention with its cache types; its reserve graph computes logits for n_parallel rows
// (common_base_params_to_speculative: n_outputs_max = n_parallel); its weights by -ngld.
void add_draft(const Setup& s, const Candidate& c, int ctx, Option& o) {
  const Setup::Draft& d = *s.draft;
  const ModelSpec& dm = *d.model;
  const EngineSpec& e = *s.engine;
  const Request& r = s.request;
  const GgmlType& tk = e.type(d.type_k, "--cache-type-k-draft");
  const GgmlType& tv = e.type(d.type_v, "--cache-type-v-draft");
  ContextShape shape = context_shape(dm, e, ctx, r.n_parallel, r.kv_unified, s.resolved.n_ubatch, s.resolved.n_batch, r.swa_full,
                                     c.flash_attn);
  shape.n_outputs = std::min(shape.n_ubatch, std::max(1, r.n_parallel));
  const BackendSpec& cpu = e.backend("cpu");
  const KvCacheBytes kv = kv_cache_bytes(dm, e, shape, tk, tv, c.flash_attn, *s.backend, d.placement.first_gpu_layer);
  const KvCacheBytes kv_host = kv_cache_bytes(dm, e, shape, tk, tv, c.flash_attn, cpu, 0, d.placement.first_gpu_layer);
  const ComputeBytes compute = s.compute(dm, shape, tk, tv, c.flash_attn, *s.backend);
  const WeightBytes w = weight_bytes(dm, d.format(), e, *s.backend, d.placement);
  auto put = [&](const std::string& what, const std::string& pool, const Figure& f) {
    if (f.bytes != 0) o.allocations.push_back({"draft", what, pool, f});
  };
  put("weights", s.device_pool, w.device);
  put("weights_host", s.host_pool, w.host);
  auto put_kv = [&](const KvCacheBytes& k, const std::string& pool) { put_kv_parts(k, pool, put); };
  put_kv(kv, s.device_pool);
  put_kv(kv_host, s.host_pool);
  put("compute", s.device_pool, compute.device);
  put("compute_host", s.host_pool, compute.host);
  put("output", s.host_pool, output_bytes(dm, shape));
}

// The vision projector (component "mmproj", tools/mtmd/clip.cpp): its tensors on the GPU unless
// --no-mmproj-offload, and the compute buffer of the encoder's warm-up graph, estimated for one image of
// the configured size: n_patches rows through the FFN and beside attention, plus the f32 KQ without flash
// attention (n_patches² · heads).
void add_projector(const Setup& s, const Candidate& c, Option& o) {
  const ProjectorSpec& p = *s.request.mmproj;
  const EngineSpec& e = *s.engine;
  const BackendSpec& backend = s.request.mmproj_offload ? *s.backend : e.backend("cpu");
  const std::string& pool = s.request.mmproj_offload ? s.device_pool : s.host_pool;
  Figure weights;
  for (const auto& t : p.tensors) {
    const Figure f = tensor_bytes(e.type(t.type, "--mmproj"), t.ne0, t.nrows, backend);
    weights.bytes += f.bytes;
    weights.unpadded += f.unpadded;
  }
  weights.high = weights.bytes;
  o.allocations.push_back({"mmproj", "weights", pool, weights});
  const double n = p.n_patches() + 1.0;
  const double bytes = n * (2.0 * p.ff + 6.0 * p.embd) * 4 + (c.flash_attn ? 0 : n * n * p.heads * 4);
  if (bytes > 0)
    o.allocations.push_back({"mmproj", "compute", pool, Figure::estimate(static_cast<Bytes>(bytes), static_cast<Bytes>(bytes * 1.5))});
}

Option account(const Setup& s, const Candidate& c, int ctx) {
  if (s.own_memory) return account_runtime(s, c, ctx);
  const ModelSpec& m = *s.model;
  const EngineSpec& e = *s.engine;
  const Request& r = s.request;
  const GgmlType& tk = e.type(c.k, "--cache-type-k");
  const GgmlType& tv = e.type(c.v, "--cache-type-v");
  const ContextShape shape =
      [&] {
        ContextShape sh = context_shape(m, e, ctx, r.n_parallel, r.kv_unified, s.resolved.n_ubatch, s.resolved.n_batch, r.swa_full,
                                        c.flash_attn);
        sh.n_outputs = std::min(sh.n_ubatch, s.resolved.n_outputs_max);
        return sh;
      }();
  const Placement& place = s.placement;
  const BackendSpec& cpu = e.backend("cpu");
  // KV of each layer lives on that layer's device (offload_kqv, llama-kv-cache.cpp dev_layer(il)).
  const KvCacheBytes kv = kv_cache_bytes(m, e, shape, tk, tv, c.flash_attn, *s.backend, place.first_gpu_layer);
  const KvCacheBytes kv_host = kv_cache_bytes(m, e, shape, tk, tv, c.flash_attn, cpu, 0, place.first_gpu_layer);
  ComputeBytes compute = s.compute(m, shape, tk, tv, c.flash_attn, *s.backend);
  const bool host_matmuls = place.partial() || place.cpu_moe_layers > 0 || !place.overrides.empty();
  if (host_matmuls) {
    // Host-resident weights used in matmuls are copied into the GPU compute buffer for batches of 32
    // or more (ggml-cuda offload_op, GGML_OP_OFFLOAD_MIN_BATCH); CPU layers need their own compute.
    if (shape.n_ubatch >= 32 && s.backend->id != "cpu") {
      compute.device.bytes += c.weight_bytes.largest_host_matrix;
      compute.device.unpadded += c.weight_bytes.largest_host_matrix;
      compute.device.high += c.weight_bytes.largest_host_matrix;
    }
    if (place.first_gpu_layer > 0) {
      const ComputeBytes cpu_part = s.compute(m, shape, tk, tv, c.flash_attn, cpu);
      compute.host.bytes += cpu_part.device.bytes;
      compute.host.unpadded += cpu_part.device.unpadded;
      compute.host.high += cpu_part.device.high;
    }
  }

  Option o;
  o.weights = c.weights->id;
  o.ctx_size = ctx;
  o.ctx_per_slot = r.kv_unified ? shape.n_ctx : shape.n_ctx_seq;
  o.cache_type_k = c.k;
  o.cache_type_v = c.v;
  o.flash_attn = c.flash_attn;
  o.beyond_native = o.ctx_per_slot > m.ctx_native;
  o.below_task_min = o.ctx_per_slot < s.task->ctx_min;
  o.needs = c.needs;
  auto put = [&](const std::string& what, const std::string& pool, const Figure& f) {
    const bool always = (what == "k_cache" || what == "v_cache") && pool == s.device_pool;
    if (f.bytes != 0 || always) o.allocations.push_back({"main", what, pool, f});
  };
  auto put_kv = [&](const KvCacheBytes& k, const std::string& pool) { put_kv_parts(k, pool, put); };
  if (s.gpu_pools.size() <= 1) {
    put("weights", s.device_pool, c.weight_bytes.device);
    put_kv(kv, s.device_pool);
    put("compute", s.device_pool, compute.device);
  } else {
    // Several GPUs (split mode layer): each GPU holds its layers' weights and KV (a contiguous range) and a
    // compute buffer of its own; the logits block only where the output layer is. With every layer
    // offloaded llama.cpp runs the GPUs as a pipeline (n_copies 4, ggml-backend.cpp), which enlarges the
    // compute buffers by an amount kvplan has not measured: their bound is doubled.
    const int last = m.layers;
    for (size_t d = 0; d < s.gpu_pools.size(); ++d) {
      const std::string& pool = s.gpu_pools[d];
      int begin = last, end = 0;
      for (int il = 0; il < m.layers; ++il)
        if (place.device_of(il) == static_cast<int>(d)) begin = std::min(begin, il), end = std::max(end, il + 1);
      put("weights", pool, c.weight_bytes.per_device.at(d));
      if (begin < end) put_kv(kv_cache_bytes(m, e, shape, tk, tv, c.flash_attn, *s.backend, begin, end), pool);
      const bool holds_output = place.device_of(last) == static_cast<int>(d);
      if (begin >= end && !holds_output) continue;
      Figure part = s.compute(m, shape, tk, tv, c.flash_attn, *s.backend, holds_output).device;
      if (d == 0 && host_matmuls) part = compute.device;  // the op-offload copy is on the main GPU
      if (s.resolved.pipeline_parallel) part.high *= 2;
      put("compute", pool, part);
    }
  }
  put("weights_host", s.host_pool, c.weight_bytes.host);
  put_kv(kv_host, s.host_pool);
  put("compute_host", s.host_pool, compute.host);
  put("output", s.host_pool, output_bytes(m, shape));
  if (s.draft) add_draft(s, c, ctx, o);
  if (r.mmproj) add_projector(s, c, o);
  sum_pools(s, o);
  return o;
}

// Decode speed (docs/formulas.md §11): one token reads every active weight and the whole KV cache once;
// each pool streams its share at its bandwidth, the pools one after another (layers run in order).
// Bandwidth efficiency 0.75 typical, 0.55 low: llama.cpp reaches about 0.77 of an RTX 3090's 936 GB/s on
// Llama-3-8B Q4_0 at batch 1 (155 t/s, ggml-org/llama.cpp#15802). MoE experts are read in proportion
// experts_used / experts; token_embd is a row lookup, not read.
void estimate_speed(const Setup& s, const Candidate& c, Option& o) {
  const double lookup = static_cast<double>(c.weight_bytes.lookup_host);  // token_embd in RAM: a row per token
  const ModelSpec& m = *s.model;
  double active = 1;
  if (m.moe && m.moe->experts > 0 && m.params > 0) {
    const double expert_params = static_cast<double>(m.layers) * m.moe->experts * 3.0 * m.embd * m.moe->expert_ff;
    active = 1 - std::min(0.95, expert_params / static_cast<double>(m.params)) * (1 - static_cast<double>(m.moe->experts_used) / m.moe->experts);
  }
  double seconds = 0, worst = 0;
  for (const auto& pool : s.pools) {
    double bytes = 0;
    for (const auto& a : o.allocations) {
      if (a.pool != pool.id) continue;
      if (a.what == "weights") bytes += static_cast<double>(a.figure.bytes) * active;
      else if (a.what == "weights_host" && pool.kind == "host") {
        // RAM-resident layers are read by the CPU; token_embd (the input layer) is only looked up
        bytes += std::max(0.0, static_cast<double>(a.figure.bytes) - lookup) * active;
      } else if (a.what == "k_cache" || a.what == "v_cache" || a.what == "swa_k_cache" || a.what == "swa_v_cache" || a.what == "state")
        bytes += static_cast<double>(a.figure.bytes) / std::max(1, s.request.n_parallel);  // one conversation's cache
    }
    if (bytes <= 0) continue;
    const double bw = s.pool_bandwidth.count(pool.id) ? s.pool_bandwidth.at(pool.id) : 0;
    if (bw <= 0) return;  // unknown bandwidth: no estimate
    const double t = bytes / (bw * 1e9);
    seconds += t;
    if (t > worst) worst = t, o.decode_bound = pool.id;
  }
  if (seconds <= 0) return;
  o.decode_tps = 0.75 / seconds;
  o.decode_tps_low = 0.55 / seconds;

  // Prefill: per token 2 FLOPs per active weight plus the attention over half the prompt on average
  // (4 · n_layer · n_head · head_dim · ctx / 2), on the GPUs at 0.8 of their FP16 tensor throughput
  // (RTX 3090 pp2048 Q6_K: 3491 t/s, ggml-org/llama.cpp#7860; RTX 4090 pp512 Q4_0: 10358 t/s, #7676).
  // Weights in RAM are computed on the GPU too (op offload), after a PCIe copy per ubatch (25 GB/s).
  Bytes weights_all = 0, weights_gpu = 0, weights_host_matmul = 0;
  for (const auto& a : o.allocations) {
    if (a.component != "main" || (a.what != "weights" && a.what != "weights_host")) continue;
    weights_all += a.figure.bytes;
    if (a.what == "weights") weights_gpu += a.figure.bytes;
  }
  const bool host_layers = s.placement.partial() || s.placement.cpu_moe_layers > 0 || !s.placement.overrides.empty();
  weights_host_matmul = host_layers ? std::max<Bytes>(0, weights_all - weights_gpu - c.weight_bytes.lookup_host) : 0;
  double tflops = 0;  // the GPUs work one after another: the slowest one's throughput, a lower bound
  for (const auto& pool : s.pools)
    if (s.pool_tflops.count(pool.id)) tflops = tflops == 0 ? s.pool_tflops.at(pool.id) : std::min(tflops, s.pool_tflops.at(pool.id));
  if (tflops <= 0 || weights_all <= 0) return;
  const double flops_per_token = 2.0 * static_cast<double>(m.params) * active +
                                 4.0 * m.layers * m.heads * m.head_dim_k * (o.ctx_per_slot / 2.0);
  const double ub = s.resolved.n_ubatch;
  const double t_ubatch = flops_per_token * ub / (tflops * 1e12 * 0.8) + static_cast<double>(weights_host_matmul) * active / 25e9;
  o.prefill_tps = ub / t_ubatch;
}

double weights_bpw(const ModelSpec& m, const WeightBytes& w) {
  return static_cast<double>(w.device.unpadded + w.host.unpadded - (m.tied_embeddings ? w.host.unpadded : 0)) * 8 /
         static_cast<double>(m.params);
}

void score(const Setup& s, const Candidate& c, Option& o) {
  priors::QualityInput in;
  in.model = s.model;
  in.weights = c.weights;
  in.weights_bpw = weights_bpw(*s.model, c.weight_bytes);
  in.type_k = prior_name(s, c.k, true);
  in.type_v = prior_name(s, c.v, false);
  in.ctx = o.ctx_per_slot;
  in.rotation = uses_rotation(s, c.k, c.v);
  in.task = s.task;
  o.quality = priors::assess(s.catalog->prior, in);
}

// The largest context (a multiple of 256, at most `cap`) at which the option fits; 0 if none.
int largest_fitting_ctx(const Setup& s, const Candidate& c, int cap) {
  // Without unified KV each slot gets PAD(ctx / n_parallel, 256): step by whole slots.
  const int step = s.own_memory ? 256 : s.engine->ctx_pad * (s.request.kv_unified ? 1 : s.request.n_parallel);
  int lo = 0, hi = cap / step;  // in steps
  if (hi < 1) return 0;
  if (account(s, c, hi * step).fits()) return hi * step;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (account(s, c, mid * step).fits() ? lo : hi) = mid;
  }
  return lo * step;
}

std::string describe_k(const std::string& k, double bits) {
  if (bits >= 16) return k + " K (lossless)";
  if (bits >= 8) return "8-bit K";
  return fmt::format("{}-bit K", bits >= 5.5 ? 5 : 4);
}

std::string reason_for(const Setup& s, const Option& o) {
  const auto& prior = s.catalog->prior;
  const double kb = k_bits(s, o.cache_type_k), vb = v_bits(s, o.cache_type_v);
  std::vector<std::string> parts;
  const int target = s.task->ctx_target;
  if (o.below_task_min) parts.push_back(fmt::format("below the task minimum of {}", s.task->ctx_min));
  else if (o.ctx_per_slot >= target) parts.push_back(fmt::format("reaches the {} target", target));
  else parts.push_back(fmt::format("ctx < {} target", target));
  if (o.sum("k_cache") + o.sum("swa_k_cache") == 0) {
    parts.push_back("no KV cache: recurrent state only");
  } else {
    const double stored = std::floor(k_storage_bits(s, o.cache_type_k));  // fp8: 8, exl2 Q6 K: 8, exl3 6: 6
    parts.push_back(!s.own_memory ? describe_k(o.cache_type_k, kb)
                    : stored >= 16 ? o.cache_type_k + " K (lossless)" : fmt::format("{}-bit K", static_cast<int>(stored)));
    if (kb <= prior.low_bits) parts.push_back("keys degrade with context");
    else if (vb < kb) parts.push_back("V compressed first");
  }
  if (!o.flash_attn) parts.push_back("no flash attention");
  if (o.beyond_native) parts.push_back("rope-scaled");
  for (const auto& n : o.needs) parts.push_back("needs " + n);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

// Ranking rule (docs/ranking.md): options at or above the task minimum first; then the risk band;
// then context towards the target; then expected loss; then headroom; then a stable tie-break.
bool ranks_before(const Setup& s, const Option& a, const Option& b) {
  const int target = s.task->ctx_target;
  auto key = [&](const Option& o) {
    return std::make_tuple(o.below_task_min, static_cast<int>(o.quality.risk), -std::min(o.ctx_per_slot, target));
  };
  if (key(a) != key(b)) return key(a) < key(b);
  if (a.quality.expected_loss != b.quality.expected_loss) return a.quality.expected_loss < b.quality.expected_loss;
  const Bytes ha = a.device_headroom(), hb = b.device_headroom();
  if (ha != hb) return ha > hb;
  // Deterministic tie-break: flash attention on, then the catalog's order of formats and types.
  if (a.flash_attn != b.flash_attn) return a.flash_attn;
  auto order = [&](const Option& o) {
    const auto& f = s.own_memory ? s.runtime->weight_formats : s.catalog->weight_formats;
    const auto t = cache_type_ids(s);
    auto pos = [](const auto& v, const auto& pred) { return std::find_if(v.begin(), v.end(), pred) - v.begin(); };
    return std::make_tuple(pos(f, [&](const WeightFormat& w) { return w.id == o.weights; }),
                           pos(t, [&](const std::string& x) { return x == o.cache_type_k; }),
                           pos(t, [&](const std::string& x) { return x == o.cache_type_v; }));
  };
  return order(a) < order(b);
}

// b dominates a: as much context (towards the target), no more loss, no less headroom, one strictly better.
bool dominates(const Setup& s, const Option& b, const Option& a) {
  const int t = s.task->ctx_target;
  const int ca = std::min(a.ctx_per_slot, t), cb = std::min(b.ctx_per_slot, t);
  const double la = a.quality.expected_loss, lb = b.quality.expected_loss;
  const Bytes ha = a.device_headroom(), hb = b.device_headroom();
  return cb >= ca && lb <= la && hb >= ha && (cb > ca || lb < la || hb > ha);
}

std::string loss_pct(double x) { return x < 0.001 ? fmt::format("{:.2f}%", x * 100) : fmt::format("{:.1f}%", x * 100); }

// Why the recommendation: the K/V reasoning with the evidence behind it, what the target would cost.
std::vector<std::string> explain(const Setup& s, const Option& best, const std::vector<Option>& all) {
  std::vector<std::string> lines;
  const auto& prior = s.catalog->prior;
  const double kb = k_bits(s, best.cache_type_k), vb = v_bits(s, best.cache_type_v);
  const int target = s.task->ctx_target;
  auto text = [&](const std::string& id) {
    const Evidence* e = prior.find_evidence(id);
    return e ? e->text + " [" + e->source + "]" : std::string{};
  };
  // The same weights with 4-bit keys: what the user would get by squeezing K instead.
  const Option* low_k = nullptr;
  for (const auto& o : all)
    if (o.weights == best.weights && k_bits(s, o.cache_type_k) <= prior.low_bits &&
        (!low_k || o.ctx_per_slot > low_k->ctx_per_slot ||
         (o.ctx_per_slot == low_k->ctx_per_slot && o.quality.expected_loss < low_k->quality.expected_loss)))
      low_k = &o;
  const auto ids = cache_type_ids(s);
  const bool low_k_possible = std::any_of(ids.begin(), ids.end(), [&](const std::string& t) { return k_bits(s, t) <= prior.low_bits; });
  if (kb > prior.low_bits && !low_k_possible) {
    lines.push_back(fmt::format("K is at {}: {} offers no 4-bit key cache, the safe side: {}.", best.cache_type_k, s.resolved.engine,
                                text("k4_vs_v4")));
  } else if (kb > prior.low_bits) {
    std::string line = fmt::format("K stays at {} rather than 4 bits: {}.", best.cache_type_k, text("k4_vs_v4"));
    if (low_k)
      line += fmt::format(" Here K={} V={} would run {} tokens at ~{} expected loss ({}).", low_k->cache_type_k, low_k->cache_type_v,
                          low_k->ctx_per_slot, loss_pct(low_k->quality.expected_loss), risk_name(low_k->quality.risk));
    lines.push_back(line);
  } else if (s.request.cache_type_k) {
    lines.push_back(fmt::format("K is at {} as asked: expect degradation as context grows ({}).", best.cache_type_k, text("k4_ctx_growth")));
  } else {
    lines.push_back(fmt::format("K is at {}: nothing with 8-bit keys fits; expect degradation as context grows ({}).", best.cache_type_k,
                                text("k4_ctx_growth")));
  }
  if (vb < kb) lines.push_back(fmt::format("V is compressed first ({}): {}.", best.cache_type_v, text("v4_cheap")));
  // The weights: say what the lower-loss format would have cost in context.
  // (the same cache types, more precise weights: the one reaching the longest context)
  const Option* least_loss = nullptr;
  for (const auto& o : all)
    if (o.cache_type_k == best.cache_type_k && o.cache_type_v == best.cache_type_v && o.flash_attn == best.flash_attn &&
        o.quality.weights_loss < best.quality.weights_loss &&
        (!least_loss || o.ctx_per_slot > least_loss->ctx_per_slot ||
         (o.ctx_per_slot == least_loss->ctx_per_slot && o.quality.weights_loss < least_loss->quality.weights_loss)))
      least_loss = &o;
  if (least_loss && least_loss->ctx_per_slot < best.ctx_per_slot)
    lines.push_back(fmt::format("Weights {} rather than the more precise {}: with the same cache {} reaches only {} tokens here.",
                                best.weights, least_loss->weights, least_loss->weights, least_loss->ctx_per_slot));
  if (best.ctx_per_slot < target) {
    const Option* at_target = nullptr;
    for (const auto& o : all)
      if (o.ctx_per_slot >= target && (!at_target || ranks_before(s, o, *at_target))) at_target = &o;
    std::string alt = at_target ? fmt::format(" Reaching {} tokens takes {} weights with K={} V={} ({}, ~{}).", target, at_target->weights,
                                              at_target->cache_type_k, at_target->cache_type_v, risk_name(at_target->quality.risk),
                                              loss_pct(at_target->quality.expected_loss))
                                : fmt::format(" Nothing reaches {} tokens on this device.", target);
    lines.push_back(fmt::format("Context is {} of the task's {} per conversation: kvplan shortens context before starving K.{}",
                                best.ctx_per_slot, target, alt));
  }
  for (const auto& e : best.quality.evidence)
    if (std::none_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(e.substr(0, 40)) != std::string::npos; }))
      lines.push_back("Evidence: " + e);
  return lines;
}

}  // namespace

Plan plan(const Catalog& catalog, const Request& request) {
  const Setup s = resolve(catalog, request);
  const ModelSpec& m = *s.model;
  const Request& r = s.request;  // with a pasted GGUF name split into model and weights

  Plan out;
  out.request = request;  // what was asked, as given
  out.resolved = s.resolved;
  out.model = s.model;
  out.task = s.task;
  out.pools = s.pools;
  out.warnings.insert(out.warnings.end(), s.warnings.begin(), s.warnings.end());
  if (!s.backend->verified && !s.own_memory)
    out.warnings.push_back(fmt::format("{} kernel rules are not verified against llama.cpp source; treat feasibility as a guess", s.backend->name));

  // ---- enumerate what the engine accepts ----
  std::vector<const WeightFormat*> formats;
  if (s.own_memory) {
    // The engine's own formats (safetensors, EXL2/EXL3, MLX), sized from the parameter count.
    std::vector<std::string> ids;
    for (const auto& f : s.runtime->weight_formats) {
      ids.push_back(f.id);
      if (!r.weights || f.id == *r.weights) formats.push_back(&f);
    }
    if (formats.empty()) throw InputError("--weights", *r.weights, "is not a weight format of " + s.runtime->name, ids, closest_match(*r.weights, ids));
  } else if (!m.file_tensors.empty()) {
    // A GGUF file: its own tensors, in its own format.
    const WeightFormat* known = catalog.find_weight_format(m.file_format);
    formats.push_back(known ? known : &s.file_format);
  } else if (r.weights) {
    const WeightFormat& f = catalog.weight_format(*r.weights);
    const bool by_params = m.mla || m.recurrent;
    if (!by_params && f.base_type.empty()) throw InputError("--weights", *r.weights, "has no per-tensor recipe in data/weights");
    formats.push_back(&f);
  } else {
    // Models sized from their parameter count need the format's measured bits per weight.
    const bool by_params = m.mla || m.recurrent;
    for (const auto& f : catalog.weight_formats)
      if (f.offered && !f.base_type.empty() && (!by_params || f.bpw_llama31_8b > 0)) formats.push_back(&f);
  }
  const std::vector<std::string> types = cache_type_ids(s);
  std::vector<std::string> offered = s.engine->cache_types_offered;
  if (s.runtime) {
    offered.clear();
    for (const auto& t : s.runtime->cache_types)
      if (t.offered) offered.push_back(t.id);
  }
  const bool same_type = s.runtime && s.runtime->same_type_kv;
  std::vector<std::string> ks = r.cache_type_k ? std::vector<std::string>{*r.cache_type_k} : offered;
  std::vector<std::string> vs = r.cache_type_v ? std::vector<std::string>{*r.cache_type_v} : offered;
  std::vector<bool> fas = r.flash_attn == "auto" ? std::vector<bool>{true, false} : std::vector<bool>{r.flash_attn == "on"};
  if (s.own_memory) fas = {true};  // the engine's own attention kernels; nothing to choose
  // What the cache types act on: no attention layer (pure recurrent) -> nothing to choose;
  // an MLA cache without V -> V is a view of K, so -ctv follows -ctk.
  bool any_attention = false, any_v = false;
  for (const auto& lc : layer_caches(m, *s.engine)) {
    any_attention |= lc.kind == LayerKind::full || lc.kind == LayerKind::sliding;
    any_v |= lc.v_width > 0;
  }
  if (!any_attention) {
    const std::string plain = s.runtime ? s.runtime->cache_types.front().id : "f16";
    ks = {r.cache_type_k.value_or(plain)};
    vs = {r.cache_type_v.value_or(plain)};
    if (r.flash_attn == "auto") fas = {true};
  }
  const bool v_follows_k = any_attention && !any_v && !r.cache_type_v;

  std::vector<Candidate> candidates;
  std::vector<engines::PairCheck> refusals;
  auto check_pair = [&](const std::string& k, const std::string& v, bool fa) {
    return s.own_memory ? check_runtime_pair(s, k, v) : engines::check_pair(*s.engine, *s.backend, m, r.build, k, v, fa);
  };
  for (const auto* f : formats) {
    const WeightBytes wb = s.own_memory ? engines::runtime_weight_bytes(m, *f, s.engine->weights_rel_error_fallback, s.resolved.tensor_parallel)
                                        : weight_bytes(m, *f, *s.engine, *s.backend, s.placement);
    for (const auto& k : ks)
      for (const auto& v : vs)
        for (bool fa : fas) {
          if ((v_follows_k || same_type) && v != k) continue;
          // Without attention layers the cache types and flash attention act on nothing.
          engines::PairCheck check = check_pair(k, v, fa);
          if (!any_attention && !check.ok && check.slow) check = engines::PairCheck{true, false, {}, {}};  // no attention kernel is ever run
          if (check.ok && s.draft) {
            // The draft context runs with the same flash-attention setting and its own cache types.
            engines::PairCheck d = engines::check_pair(*s.engine, *s.backend, *s.draft->model, r.build, s.draft->type_k, s.draft->type_v, fa);
            if (!d.ok) {
              d.reason = "the draft model: " + d.reason;
              check = d;
            }
          }
          if (!check.ok && !(check.slow && r.allow_slow)) {
            if (f == formats.front()) refusals.push_back(check);
            continue;
          }
          candidates.push_back(Candidate{f, k, v, fa, check.slow, check.needs, check.slow ? check.reason : "", wb});
        }
  }
  if (candidates.empty()) {
    // An explicit request the engine will not run: exit 2 with the reason, what would help, and the
    // pairs that run with the same flash-attention setting.
    std::vector<std::string> alternatives;
    for (const auto& k : types)
      for (const auto& v : types)
        if ((!same_type || k == v) && std::any_of(fas.begin(), fas.end(), [&](bool fa) { return check_pair(k, v, fa).ok; }))
          alternatives.push_back(k + "/" + v);
    const auto& first = refusals.front();
    std::vector<std::string> help;
    if (!first.needs.empty()) help.push_back("use --build fa-all-quants if your build has GGML_CUDA_FA_ALL_QUANTS");
    if (!first.slow && r.flash_attn == "off") help.push_back("use --flash-attn on");
    if (first.slow) help.push_back("use --allow-slow to plan it off the fast path");
    std::string advice;
    for (const auto& h : help) advice += (advice.empty() ? "; " : ", or ") + h;
    const std::string asked = r.cache_type_k.value_or("*") + "/" + r.cache_type_v.value_or("*");
    throw InputError("--cache-type-k/--cache-type-v", asked,
                     s.own_memory ? fmt::format("{} will not run this: {}", s.runtime->name, first.reason)
                                  : fmt::format("{} ({} backend, {} build) will not run this: {}{}", s.resolved.engine, s.backend->name,
                                                r.build, first.reason, advice),
                     alternatives);
  }

  // ---- context per candidate: pinned, largest that fits (inverse query), or towards the target ----
  const bool types_pinned = r.cache_type_k && r.cache_type_v;
  if (r.ctx_size && types_pinned && r.weights) out.mode = "single";
  else if (r.ctx_size) out.mode = "best_types";
  else if (types_pinned) out.mode = "max_context";
  else out.mode = "rank";
  // Targets and model limits are per conversation; -c counts every slot when the KV is not unified.
  const int slots = r.kv_unified || s.own_memory ? 1 : r.n_parallel;
  const int cap = slots * (out.mode == "max_context" ? s.ctx_allowed : std::min(s.task->ctx_target, s.ctx_allowed));

  std::vector<Option> fitting, failing;
  std::vector<const Candidate*> failing_candidates;
  for (const auto& c : candidates) {
    int ctx = 0;
    if (r.ctx_size) {
      ctx = *r.ctx_size;
    } else {
      ctx = largest_fitting_ctx(s, c, cap);
      // ranked options below the cap use round numbers (multiples of 1024); the inverse query keeps 256
      if (out.mode == "rank" && ctx < cap && ctx >= 2048 * slots) ctx = ctx / (1024 * slots) * (1024 * slots);
    }
    Option o = account(s, c, ctx > 0 ? ctx : std::min(cap, std::max(kMinCtx, s.task->ctx_min)));
    score(s, c, o);
    o.warnings = {};
    if (c.slow) o.warnings.push_back(c.slow_reason);
    if (s.placement.first_gpu_layer > 0 || !s.placement.output_on_gpu)
      o.warnings.push_back(fmt::format("{} of {} layers{} run on the CPU from RAM: decoding is bound by host memory bandwidth",
                                       s.placement.first_gpu_layer, m.layers, s.placement.output_on_gpu ? "" : " and the output layer"));
    if (s.placement.cpu_moe_layers > 0)
      o.warnings.push_back(fmt::format("the experts of {} layers stay in RAM: each token reads its active experts from host memory",
                                       s.placement.cpu_moe_layers));
    if (o.beyond_native)
      o.warnings.push_back(fmt::format("{} tokens is beyond the native {}: uses {} rope scaling (quality past the native window is "
                                       "the model's, not measured here)", o.ctx_per_slot, m.ctx_native,
                                       m.rope_scaling ? m.rope_scaling->type : "rope"));
    if (out.mode == "max_context" && ctx == cap && o.ctx_per_slot < m.max_ctx() && m.rope_scaling)
      o.warnings.push_back(fmt::format("stopped at {}'s native {} tokens; longer contexts need --rope-scaling {} --rope-scale {:g}",
                                       m.name, m.ctx_native, m.rope_scaling->type, m.rope_scaling->factor));
    o.reason = reason_for(s, o);
    o.launches = s.runtime ? engines::runtime_launches(*s.runtime, m, o, s.resolved)
                           : engines::launch_lines(m, o, s.resolved, s.engine->default_ubatch, s.engine->default_batch);
    o.launch = o.launches.front().text;
    if (s.runtime && s.runtime->kind == "mlx" && prior_name(s, o.cache_type_k, true) != "f16")
      o.warnings.push_back("mlx_lm.server has no KV quantization flags: this cache runs with mlx_lm.generate or the Python API (kv_bits)");
    estimate_speed(s, c, o);
    if (o.fits() && ctx > 0) {
      fitting.push_back(std::move(o));
    } else {
      failing.push_back(std::move(o));
      failing_candidates.push_back(&c);
    }
  }

  if (fitting.empty()) {
    // Nothing fits: say what is missing and what would.
    // What is missing: the pool short by the most (the GPU, or host RAM under --ram).
    auto short_pool = [&](const Option& o) {
      size_t worst = 0;
      for (size_t i = 1; i < o.pools.size(); ++i)
        if (o.pools[i].headroom < o.pools[worst].headroom) worst = i;
      return worst;
    };
    auto need = [&](const Option& o) { return -o.pools[short_pool(o)].headroom; };
    std::vector<size_t> order(failing.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return need(failing[a]) < need(failing[b]); });
    const Option& closest = failing[order.front()];
    const Pool& dev = s.pools[short_pool(closest)];
    out.nothing_fits = fmt::format(
        "on {}, the smallest option ({} weights, {} tokens, K={} V={}) needs {} more than the {} the plan can use. "
        "It would fit {} of {} GiB",
        dev.device, closest.weights, closest.ctx_size, closest.cache_type_k, closest.cache_type_v, format_size(need(closest)),
        format_size(dev.budget()), dev.kind == "host" ? "with host RAM" : "a device", format_gib(dev.capacity + need(closest)));
    // With the context pinned, the same configuration at the longest context that does fit.
    const int shorter = r.ctx_size ? largest_fitting_ctx(s, *failing_candidates[order.front()], *r.ctx_size) : 0;
    out.nothing_fits += shorter > 0 ? fmt::format(", or -c {} with the same weights and cache types", shorter)
                                    : ", or try a smaller model or a shorter context";
    // Full offload does not fit: how many layers would, with the rest in RAM (-ngl).
    if (!s.own_memory && !r.n_gpu_layers && s.backend->id != "cpu" && s.pools.size() > 1 && short_pool(closest) == 0) {
      Setup alt = s;
      Candidate c = *failing_candidates[order.front()];
      auto fits_with = [&](int ngl) {
        alt.placement = Placement::for_request(m, ngl, r.n_cpu_moe, s.engine->rule_holds("ngl_counts_output"));
        alt.placement.split_points = s.placement.split_points;  // the same GPUs, the same split
        c.weight_bytes = weight_bytes(m, *c.weights, *alt.engine, *alt.backend, alt.placement);
        return account(alt, c, closest.ctx_size).fits();
      };
      if (fits_with(0)) {
        int lo = 0, hi = m.layers + 1;  // lo fits, hi does not (full offload failed)
        while (hi - lo > 1) {
          const int mid = (lo + hi) / 2;
          (fits_with(mid) ? lo : hi) = mid;
        }
        const Placement at = Placement::for_request(m, lo, r.n_cpu_moe, s.engine->rule_holds("ngl_counts_output"));
        out.nothing_fits += fmt::format(". With -ngl {} ({} of {} layers{} on the GPU, the rest in host RAM, much slower) that option fits",
                                        lo, m.layers - at.first_gpu_layer, m.layers, at.output_on_gpu ? " and the output layer" : "");
      }
    }
    std::vector<Option> sorted;
    for (size_t i : order) sorted.push_back(std::move(failing[i]));
    failing = std::move(sorted);
    failing.resize(std::min<size_t>(failing.size(), static_cast<size_t>(r.top)));
    out.options = std::move(failing);
    return out;
  }

  // ---- rank ----
  const bool any_at_min = std::any_of(fitting.begin(), fitting.end(), [](const Option& o) { return !o.below_task_min; });
  std::vector<Option> ranked;
  for (auto& o : fitting)
    if (!any_at_min || !o.below_task_min) ranked.push_back(o);
  if (!any_at_min)
    out.warnings.push_back(fmt::format("no option reaches the {} task's minimum of {} tokens; the best shorter ones are shown",
                                       s.task->id, s.task->ctx_min));
  std::vector<Option> kept;
  for (const auto& a : ranked)
    if (std::none_of(ranked.begin(), ranked.end(), [&](const Option& b) { return dominates(s, b, a); })) kept.push_back(a);
  std::sort(kept.begin(), kept.end(), [&](const Option& a, const Option& b) { return ranks_before(s, a, b); });
  out.explanation = explain(s, kept.front(), fitting);
  kept.resize(std::min<size_t>(kept.size(), static_cast<size_t>(r.top)));
  out.options = std::move(kept);
  return out;
}

}  // namespace kvplan

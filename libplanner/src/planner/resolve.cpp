// resolve(): the request checked and turned into what the engine will do (Setup): engine, model, devices and
// pools, placement, batch and context limits. Everything here is independent of the option.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <re2/re2.h>

#include "kvplan/error.hpp"
#include "model_files/validate.hpp"
#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

// Whether --gpu gives a size rather than a card: a number with nothing after it or a unit-like word ("24GB", "24XB",
// "24"); but "4090" when a card carries that number, and "4060 laptop" / "5060ti" are cards.
bool is_size(const Catalog& c, const std::string& s) {
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return false;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string rest;
  for (; i < s.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(s[i]))) rest += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
  if (rest.empty()) return c.gpu_matches(s).empty();
  const bool unit_like = rest.size() <= 3 && std::all_of(rest.begin(), rest.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); }) &&
                         (rest.back() == 'b' || rest == "g" || rest == "m" || rest == "t" || rest == "k");
  return unit_like;
}

// A bare size with a backend: the device it describes. On Metal the size is the Mac's unified RAM and llama.cpp gets
// macOS's default working set of it (the same rule as the catalog's Apple entries).
Bytes bare_size_usable(Bytes size, const std::string& backend) {
  if (backend != "metal") return size;
  return metal_default_working_set_mib(size / kMiB) * kMiB;
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
    dev.capacity = r.free ? *r.free : i < r.free_per_gpu.size() ? r.free_per_gpu[i] : d.total;
    if (i < r.gpu_detected.size()) dev.detected = r.gpu_detected[i];
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
    if (dev.budget() <= 0)  // blame what the user gave: --free, else --reserve, else the device itself
      throw InputError(r.free ? "--free" : r.reserve ? "--reserve" : "--gpu",
                       r.free ? format_size(*r.free) : r.reserve ? format_size(dev.reserve) : i == 0 ? r.gpu : d.name,
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
    // Unknown host RAM is an assumption, stated (resolve_host_ram), never unbounded: offloaded plans must fit it.
    host.capacity = r.host_ram.value_or(kAssumedHostRam);
    pools.push_back(host);
  }
  return pools;
}

// An Ollama tag that ends in a weight format ("qwen3:30b-a3b-q4_K_M", "gpt-oss:20b-fp16") names the weights as well
// as the model (the catalog's lookup drops the suffix): they are planned, not replaced by the ranker's choice.
void take_tag_weights(const Catalog& c, const Request& r, std::optional<std::string>& weights) {
  if (r.model_spec) return;
  if (const RuntimeProfile* rt = c.runtime(r.engine); rt && rt->kind != "ollama") return;  // another engine's formats
  const WeightFormat* f = c.ollama_tag_weights(r.model);
  if (!f) return;
  if (weights && *weights != f->id) throw InputError("--weights", *weights, "disagrees with the Ollama tag '" + r.model + "' (" + f->id + ")");
  weights = f->id;
}

// A pasted GGUF name ("Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf") names the model and the weight format.
void split_gguf_name(const Catalog& c, std::string& model, std::optional<std::string>& weights, const std::string& weights_flag,
                     bool file_given) {
  if (file_given) return;  // a file read from disk names its format in its header, whatever its file name says
  const std::string ext = ".gguf";
  const std::string m = model;
  if (m.size() <= ext.size() || m.compare(m.size() - ext.size(), ext.size(), ext) != 0) return;
  const std::string stem = m.substr(0, m.size() - ext.size());
  if (const auto ud = stem.find("-UD-"); ud != std::string::npos) reject_dynamic_quant("--model", stem.substr(ud + 1));
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


}  // namespace

// The cache type names the engine accepts (-ctk/-ctv take them for every engine).
std::vector<std::string> cache_type_ids(const Setup& s) {
  if (!s.runtime) return s.engine->cache_types;
  std::vector<std::string> ids;
  for (const auto& t : s.runtime->cache_types) ids.push_back(t.id);
  return ids;
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


namespace {

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
  if (r.model_draft_spec) check_model_spec(*r.model_draft_spec, "--model-draft");
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


}  // namespace

namespace {

// The device names llama.cpp's buffer types carry (CUDA0, ROCm0, Vulkan0, SYCL0); empty for CPU and Metal.
std::string device_prefix(const BackendSpec& b) {
  return b.id == "cuda" ? "CUDA" : b.id == "rocm" ? "ROCm" : b.id == "vulkan" ? "Vulkan" : b.id == "sycl" ? "SYCL" : "";
}

// The engine, the model and its flags, the task, a draft model and a projector.
void resolve_engine_and_model(const Catalog& c, Setup& s) {
  const Request& r = s.request;
  s.runtime = c.runtime(r.engine);
  s.engine = s.runtime ? &c.engines.front() : &c.engine(r.engine);
  s.own_memory = s.runtime && s.runtime->kind != "ollama";
  if (s.runtime) check_runtime_request(*s.runtime, s.request);
  s.model = r.model_spec ? r.model_spec.get() : &c.model(s.request.model);
  if (r.model_spec) check_model_spec(*r.model_spec, "--model");  // a caller's own spec crosses the same boundary as a file's
  s.file_format.id = s.model->file_format;
  s.file_format.quality_source = "";
  s.file_format.rel_loss_estimate = true;  // not a catalog format: no measured loss
  if (const WeightFormat* base = c.find_weight_format(s.model->file_format); base && !s.model->file_quant_label.empty()) {
    // A custom mix (Unsloth UD-*): sized from its own tensors; the loss of its base file type stands in.
    s.file_format = *base;
    s.file_format.id = s.model->file_quant_label + " (file type " + base->id + ")";
    s.file_format.rel_loss_estimate = true;
    s.file_format.quality_source = "quality of " + base->id + ", the file's general.file_type (the UD mix differs per tensor)";
  }
  if (r.model_spec && r.weights && !r.model_spec->file_format.empty() && *r.weights != r.model_spec->file_format &&
      *r.weights != r.model_spec->file_quant_label && !r.model_spec->file_tensors.empty())
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
}

// Slots, tensor parallelism, batch sizes, flash attention, the build and the cache type names.
void check_limits(Setup& s) {
  const Request& r = s.request;
  const bool serving = s.runtime && (s.runtime->kind == "vllm" || s.runtime->kind == "sglang");
  const int max_parallel = serving ? 1 << 20 : 256;  // a serving engine's --max-num-seqs has no slot cost of its own
  if (r.n_parallel < 1 || r.n_parallel > max_parallel)
    throw InputError("--parallel", std::to_string(r.n_parallel), fmt::format("must be 1..{}", max_parallel));
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
  s.resolved.n_ubatch = ub;
  s.resolved.n_batch = b;
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
}

// Devices: "--gpu 2x24GB" or --gpu repeated; each a catalog GPU or a bare size.
std::vector<std::string> device_specs(Setup& s) {
  const Request& r = s.request;
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
  if (several && s.runtime) {
    const bool same = std::all_of(specs.begin(), specs.end(), [&](const std::string& g) { return g == specs.front(); });
    const std::string tp = s.runtime->kind == "vllm" ? "--tensor-parallel-size" : "--tp";
    const bool splits = s.runtime->kind == "vllm" || s.runtime->kind == "sglang";
    if (same && splits && r.tensor_parallel == 1 && r.pipeline_parallel == 1 && r.nodes <= 1) {
      // n identical GPUs named one by one mean what one --gpu and --tp n say: the way both engines use them on a node
      s.request.tensor_parallel = static_cast<int>(specs.size());
      s.request.extra_gpus.clear();
      s.warnings.push_back(fmt::format("{} x {} under {}: planned as {} {} (tensor parallelism, the engine's way to use several GPUs "
                                       "of one node; give --pipeline-parallel-size for stages instead)",
                                       specs.size(), specs.front(), s.runtime->name, tp, specs.size()));
      return {specs.front()};
    }
    throw InputError("--gpu", same ? fmt::format("{}x{}", specs.size(), specs.front()) : fmt::format("{}", fmt::join(specs, ", ")),
                     s.runtime->kind == "vllm" || s.runtime->kind == "sglang"
                         ? s.runtime->name + " splits a model with " + tp + " over identical GPUs: one --gpu and the count"
                         : "several GPUs are planned for llama.cpp (and vLLM/SGLang tensor parallelism) only",
                     {}, same && (s.runtime->kind == "vllm" || s.runtime->kind == "sglang")
                             ? fmt::format("--gpu {} {} {}", specs.front(), tp, specs.size()) : std::string());
  }
  if (several && r.free) throw InputError("--free", format_size(*r.free), "applies to one GPU; with several give --reserve");
  if (!r.free_per_gpu.empty() && (r.free || r.free_per_gpu.size() != specs.size()))
    throw InputError("--free", "auto", fmt::format("found free memory for {} GPUs, and the plan has {}", r.free_per_gpu.size(), specs.size()));
  if (r.split_mode != "layer" && r.split_mode != "none")
    throw InputError("--split-mode", r.split_mode,
                     r.split_mode == "row"    ? "llama.cpp b10454 refuses row split on CUDA and ROCm: their backend no longer offers a split "
                                                "buffer type ('device CUDA0 does not support split buffers', llama-model.cpp "
                                                "make_gpu_buft_list); SYCL's is not modelled"
                     : r.split_mode == "tensor" ? "tensor split (EXPERIMENTAL in llama.cpp b10454) is not modelled"
                                                : "unknown split mode",
                     {"layer", "none"});
  const size_t n_devices = specs.size() + r.rpc_servers.size();  // llama.cpp's -ts counts the RPC devices first
  if (!r.tensor_split.empty() && r.tensor_split.size() != n_devices)
    throw InputError("--tensor-split", fmt::format("{} values", r.tensor_split.size()),
                     fmt::format("needs one value per GPU ({}{})", n_devices, r.rpc_servers.empty() ? "" : ", the --rpc hosts first"));
  if (std::any_of(r.tensor_split.begin(), r.tensor_split.end(), [](double v) { return !std::isfinite(v) || v < 0 || v > 1e6; }) ||
      (!r.tensor_split.empty() && std::all_of(r.tensor_split.begin(), r.tensor_split.end(), [](double v) { return v == 0; })))
    throw InputError("--tensor-split", "", "needs non-negative proportions up to 1e6, not all zero");
  if (r.split_mode == "none") specs.resize(1);  // llama.cpp uses the main GPU alone
  return specs;
}

// "16 x H100 in 2 nodes (TP 8 x PP 2; figures per GPU of the tightest stage)".
std::string parallel_device_name(const Request& r, const std::string& gpu) {
  const int gpus = r.tensor_parallel * r.pipeline_parallel * r.data_parallel;
  std::string layout = fmt::format("TP {}", r.tensor_parallel);
  if (r.pipeline_parallel > 1) layout += fmt::format(" x PP {}", r.pipeline_parallel);
  if (r.data_parallel > 1) layout += fmt::format(" x DP {}", r.data_parallel);
  if (r.expert_parallel) layout += ", expert parallel";
  return fmt::format("{} x {}{} ({}; figures per GPU{})", gpus, gpu, r.nodes > 1 ? fmt::format(" in {} nodes", r.nodes) : "", layout,
                     r.pipeline_parallel > 1 ? " of the tightest stage" : "");
}

// The devices, their pools, bandwidths and throughputs.
// --rpc host:port=DEVICE: llama.cpp's RPC backend (tools/rpc/rpc-server.cpp) offers one remote device per host, which
// holds layers, KV and a compute buffer like a local GPU of the same backend (the remote runs its own; kvplan sizes
// it with the local one's rules). ggml-rpc reports the remote's free memory, which sets the default layer split.
std::vector<Device> resolve_rpc(const Catalog& c, Setup& s) {
  const Request& r = s.request;
  std::vector<Device> out;
  if (r.rpc_servers.empty()) return out;
  if (s.runtime) throw InputError("--rpc", r.rpc_servers.front(), "is llama.cpp's RPC backend; " + s.runtime->name + " has none", {"--engine llama.cpp"});
  if (r.split_mode == "none") throw InputError("--rpc", r.rpc_servers.front(), "needs --split-mode layer: with none llama.cpp uses the main GPU alone");
  if (!r.free_per_gpu.empty()) throw InputError("--rpc", r.rpc_servers.front(), "give each host's free memory as its device (host:port=20GB), not --free auto");
  if (!r.override_tensors.empty()) throw InputError("--rpc", r.rpc_servers.front(), "with --override-tensor is not modelled (the RPC devices' names come first)");
  for (const std::string& entry : r.rpc_servers) {
    const auto eq = entry.find('=');
    const std::string endpoint = entry.substr(0, eq), device = eq == std::string::npos ? "" : entry.substr(eq + 1);
    const auto colon = endpoint.rfind(':');
    const std::string port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
    const bool port_ok = !port.empty() && port.size() <= 5 && std::all_of(port.begin(), port.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }) &&
                         std::stoi(port) >= 1 && std::stoi(port) <= 65535;
    if (colon == std::string::npos || colon == 0 || !port_ok)
      throw InputError("--rpc", entry, "needs host:port (port 1..65535) and the host's device, e.g. 10.0.0.2:50052=rtx3090 or 10.0.0.2:50052=24GB");
    if (device.empty()) throw InputError("--rpc", entry, "names no device: kvplan needs each host's GPU or memory, e.g. " + endpoint + "=24GB");
    Device d;
    if (is_size(c, device)) {
      d.total = parse_size(device, "--rpc");
      d.name = fmt::format("RPC[{}] {} GPU ({} GiB)", endpoint, device, format_gib(d.total));
    } else {
      d.gpu = &c.gpu(device, "--rpc");
      if (d.gpu->unified()) throw InputError("--rpc", entry, "several devices need discrete GPUs (a unified-memory host is not modelled)");
      d.total = d.gpu->total_mib * kMiB;
      d.name = fmt::format("RPC[{}] {}", endpoint, d.gpu->name);
    }
    s.resolved.rpc_endpoints.push_back(endpoint);
    out.push_back(d);
  }
  s.warnings.push_back("the --rpc hosts' layers send activations over the network each token; the speed estimate does not count the link");
  return out;
}

std::vector<Device> resolve_devices(const Catalog& c, Setup& s, const std::vector<std::string>& specs) {
  const Request& r = s.request;
  Bytes total = 0;
  std::string device_name;
  if (is_size(c, s.request.gpu)) {
    const Bytes size = parse_size(r.gpu, "--gpu");
    const bool apple = s.runtime && s.runtime->kind == "mlx";
    s.backend = &s.engine->backend(r.backend.value_or(apple ? "metal" : "cuda"));
    total = bare_size_usable(size, s.backend->id);
    device_name = s.backend->id == "metal"
                      ? fmt::format("{} unified memory ({} GiB of it for the GPU: the macOS default working set)", r.gpu, format_gib(total))
                      : fmt::format("{} GPU ({} GiB, {})", r.gpu, format_gib(total),
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
  if (r.tensor_parallel * r.pipeline_parallel * r.data_parallel > 1) device_name = parallel_device_name(r, device_name);
  std::vector<Device> devices = {{s.gpu, total, device_name}};
  const std::vector<Device> rpc_devices = resolve_rpc(c, s);
  for (size_t i = 1; i < specs.size(); ++i) {
    Device d;
    if (is_size(c, specs[i])) {
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
  devices.insert(devices.begin(), rpc_devices.begin(), rpc_devices.end());
  if (devices.size() > 1 && (s.backend->id == "cpu" || s.backend->id == "metal" || (s.gpu && s.gpu->unified())))
    throw InputError(rpc_devices.empty() ? "--gpu" : "--rpc", r.gpu, "several devices need discrete GPUs");
  for (size_t i = 0; i < r.free_per_gpu.size() && i < devices.size(); ++i)
    if (r.free_per_gpu[i] <= 0 || r.free_per_gpu[i] > devices[i].total)
      throw InputError("--free", format_size(r.free_per_gpu[i]), fmt::format("must be above 0 and at most {}'s {}", devices[i].name, format_size(devices[i].total)));
  s.pools = make_pools(s, r, devices);
  for (size_t i = 0; i < devices.size() && i < s.pools.size(); ++i)
    if (devices[i].gpu && devices[i].gpu->bandwidth_gbs > 0) s.pool_bandwidth[s.pools[i].id] = devices[i].gpu->bandwidth_gbs;
  for (size_t i = 0; i < devices.size() && i < s.pools.size(); ++i)
    if (devices[i].gpu && devices[i].gpu->fp16_tflops > 0) s.pool_tflops[s.pools[i].id] = devices[i].gpu->fp16_tflops;
  if (r.host_bandwidth_gbs && !(std::isfinite(*r.host_bandwidth_gbs) && *r.host_bandwidth_gbs > 0 && *r.host_bandwidth_gbs <= 1e6))
    throw InputError("--ram-bandwidth", fmt::format("{:g}", *r.host_bandwidth_gbs), "must be GB/s, above 0");
  if (s.pools.back().kind == "host") s.pool_bandwidth["host"] = r.host_bandwidth_gbs.value_or(60);  // dual-channel DDR5-4800: 76.8 GB/s peak
  s.device_pool = s.pools.front().id;
  s.host_pool = s.pools.back().kind == "host" ? s.pools.back().id : s.pools.front().id;
  for (const auto& p : s.pools)
    if (p.kind == "gpu") s.gpu_pools.push_back(p.id);
  return devices;
}

// -ot PATTERN=DEVICE, and the layer split over several GPUs.
void resolve_overrides(Setup& s, const std::vector<Device>& devices) {
  const Request& r = s.request;
  const std::string prefix = device_prefix(*s.backend);
  for (const auto& ot : r.override_tensors) {
    if (s.own_memory) throw InputError("--override-tensor", ot, "is a llama.cpp flag; " + s.runtime->name + " has no equivalent");
    const auto eq = ot.rfind('=');
    std::vector<std::string> names = {"CPU"};
    for (size_t i = 0; i < devices.size() && !prefix.empty(); ++i) names.push_back(prefix + std::to_string(i));
    if (eq == std::string::npos || eq == 0) throw InputError("--override-tensor", ot, "needs PATTERN=DEVICE, e.g. exps=CPU", names);
    const std::string pattern = ot.substr(0, eq), device = ot.substr(eq + 1);
    RE2::Options options;
    options.set_log_errors(false);
    if (const RE2 re(pattern, options); !re.ok())
      throw InputError("--override-tensor", ot.size() > 80 ? ot.substr(0, 80) + "…" : ot,
                       "is not a valid regular expression (RE2 syntax, as llama.cpp's ECMAScript without backreferences or lookaround): " +
                           re.error());
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
    // src/llama-context.cpp llama_context constructor: pipeline parallelism needs every layer and the output offloaded
    // (n_gpu_layers > n_layer), split mode layer, no tensor overrides, and async compute with events on every device,
    // which the Vulkan backend offers from build rule vulkan_pipeline_parallel (ggml-vulkan.cpp props caps).
    s.resolved.pipeline_parallel = s.placement.first_gpu_layer == 0 && s.placement.output_on_gpu && s.placement.overrides.empty() &&
                                   (s.backend->id != "vulkan" || s.engine->rule_holds("vulkan_pipeline_parallel"));
    if (s.draft) s.resolved.draft_device = prefix + "0";
  }
}

// What the engine will do whatever the option: its build, slots, batches, output rows.
void resolve_engine_fields(Setup& s, Bytes total) {
  const Request& r = s.request;
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
  // The program decides the logits rows of the reserve graph. llama-server sets n_outputs_max to its slots
  // (tools/server/server-context.cpp server_output_limits -> common_speculative_get_output_limits:
  // min(n_batch, n_parallel · (1 + n_draft)), n_draft 0 without speculative decoding); llama-cli, like any library
  // context (llama-cpp-python's Llama, LM Studio), leaves it 0, which llama_context's constructor reads as n_batch
  // (src/llama-context.cpp), so the reserve graph computes logits for the whole ubatch.
  static const std::vector<std::string> programs = {"llama-server", "llama-cli"};
  if (std::find(programs.begin(), programs.end(), r.program) == programs.end())
    throw InputError("--program", r.program, "is not a llama.cpp program kvplan plans for (a library context such as "
                     "llama-cpp-python: --program llama-cli, whose logits rows are the same)", programs, closest_match(r.program, programs));
  if (s.runtime && r.program != "llama-server")
    throw InputError("--program", r.program, "applies to --engine llama.cpp; " + s.runtime->name + " runs its own server");
  if (r.program == "llama-cli" && r.n_parallel != 1)
    throw InputError("--parallel", std::to_string(r.n_parallel), "llama-cli runs one conversation; several slots are llama-server's");
  s.resolved.program = r.program;
  const int server_rows = std::min(s.resolved.n_batch, r.n_parallel * (1 + s.resolved.draft_max));
  if (r.n_outputs_max && (*r.n_outputs_max < 1 || *r.n_outputs_max > s.resolved.n_batch))
    throw InputError("--n-outputs-max", std::to_string(*r.n_outputs_max), fmt::format("must be 1..{} (the batch size)", s.resolved.n_batch));
  s.resolved.n_outputs_max = r.n_outputs_max.value_or(r.program == "llama-server" ? server_rows : s.resolved.n_batch);
  s.resolved.swa_full = r.swa_full;
  if (s.runtime && !r.server_args.empty())
    throw InputError(r.server_args.front(), "", "is a llama-server flag; the " + s.runtime->name + " launch line cannot carry it");
  s.resolved.server_args = r.server_args;
  s.resolved.n_gpu_layers = r.n_gpu_layers;
  s.resolved.n_cpu_moe = r.n_cpu_moe;
}

void resolve_fit(Setup& s) {
  const Request& r = s.request;
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
}

void check_ctx_size(Setup& s, int slots);

// kvplan places layers and experts itself when the model does not fit: llama.cpp and Ollama on one discrete
// GPU with host RAM beside it, when the request pins no placement of its own.
bool may_place(const Setup& s) {
  const Request& r = s.request;
  return !s.own_memory && s.backend->id != "cpu" && s.gpu_pools.size() == 1 && s.pools.back().kind == "host" &&
         !r.n_gpu_layers && !r.n_cpu_moe && r.override_tensors.empty() && !r.fit_placement;
}

void resolve_context(Setup& s) {
  const Request& r = s.request;
  s.rotation_rule = s.engine->rule_holds("kv_rotation");
  s.op_offload_rule = s.engine->rule_holds("op_offload");
  for (const auto& b : s.engine->backends)
    if (b.id == "cpu") s.cpu_backend = &b;

  // Context beyond the native window only when asked for: the rope flags, or a -c past the native window. Rope
  // scaling is a trade the model's authors leave to the user (it changes short-context behaviour too).
  const ModelSpec& m = *s.model;
  const int slots = r.kv_unified || s.own_memory ? 1 : std::max(1, r.n_parallel);
  const bool rope_flags = r.rope_scaling || r.rope_scale || r.yarn_orig_ctx;
  const bool wants_extension = rope_flags || (r.ctx_size && *r.ctx_size > static_cast<long long>(m.ctx_native) * slots);
  s.ctx_allowed = wants_extension && m.ctx_extended > 0 ? m.ctx_extended : m.ctx_native;
  s.target_ctx = std::min(s.task->ctx_target, s.ctx_allowed);
  s.min_ctx = std::min(s.task->ctx_min, s.ctx_allowed);
  if (r.ctx_size) return check_ctx_size(s, slots);
  if (s.task->ctx_target > s.ctx_allowed && m.ctx_extended > s.ctx_allowed && m.rope_scaling)
    s.warnings.push_back(fmt::format("the {} task wants {} tokens; {} goes past its native {} only with rope scaling "
                                     "(--rope-scaling {} --rope-scale {:g}): planned within the native window",
                                     s.task->id, s.task->ctx_target, m.name, m.ctx_native, m.rope_scaling->type, m.rope_scaling->factor));
  else if (s.task->ctx_min > s.ctx_allowed)
    s.warnings.push_back(fmt::format("{}'s window of {} tokens is below the {} task's minimum of {}: planned up to the window",
                                     m.name, s.ctx_allowed, s.task->id, s.task->ctx_min));
}

// A context the user pins past the model's window is planned, as llama.cpp runs it: llama_context's constructor
// (src/llama-context.cpp) only warns "n_ctx_seq (N) > n_ctx_train (M) -- possible training context overflow".
void check_ctx_size(Setup& s, int slots) {
  const Request& r = s.request;
  const ModelSpec& m = *s.model;
  if (!r.ctx_size) return;
  if (*r.ctx_size < kMinCtx) throw InputError("--ctx-size", std::to_string(*r.ctx_size), fmt::format("must be at least {}", kMinCtx));
  if (*r.ctx_size > kMaxCtx) throw InputError("--ctx-size", std::to_string(*r.ctx_size), fmt::format("must be at most {}", kMaxCtx));
  if (*r.ctx_size > static_cast<long long>(m.max_ctx()) * slots)
    s.warnings.push_back(fmt::format("-c {} gives each slot {} tokens, past {}'s {} window of {}: llama.cpp runs it with the "
                                     "warning 'possible training context overflow', and the model was not made to attend that "
                                     "far, so expect its output to degrade past {} tokens",
                                     *r.ctx_size, *r.ctx_size / slots, m.name, m.ctx_extended ? "rope-extended" : "training",
                                     m.max_ctx(), m.max_ctx()));
}

}  // namespace

Setup resolve(const Catalog& c, const Request& request) {
  Setup s;
  s.catalog = &c;
  s.request = request;
  split_gguf_name(c, s.request.model, s.request.weights, "--weights", s.request.model_spec != nullptr);
  take_tag_weights(c, s.request, s.request.weights);
  if (!s.request.model_draft.empty())
    split_gguf_name(c, s.request.model_draft, s.request.weights_draft, "--weights-draft", s.request.model_draft_spec != nullptr);
  const Request& r = s.request;
  if (r.model.empty()) throw InputError("--model", "", "is required (a catalog name such as qwen2.5-coder-32b)");
  if (r.gpu.empty())
    throw InputError("--gpu", "", "is required (a GPU name such as rtx4090, or a size such as 24GB; or --gpu auto to detect this machine's GPU)");
  resolve_engine_and_model(c, s);
  check_limits(s);
  const std::vector<Device> devices = resolve_devices(c, s, device_specs(s));
  resolve_overrides(s, devices);
  resolve_engine_fields(s, devices.front().total);
  resolve_serving(s, devices.front().total);
  resolve_fit(s);
  resolve_context(s);
  s.auto_placement = may_place(s);
  return s;
}

}  // namespace kvplan::detail

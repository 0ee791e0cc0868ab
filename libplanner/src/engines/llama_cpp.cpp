#include "engines/llama_cpp.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kvplan::engines {
namespace {
bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

PairCheck check_pair(const EngineSpec& engine, const BackendSpec& backend, const ModelSpec& model, const std::string& build,
                     const std::string& type_k, const std::string& type_v, bool flash_attn, bool with_reason) {
  return check_pair(engine, backend, model, build, {type_k, engine.type(type_k, "--cache-type-k")},
                    {type_v, engine.type(type_v, "--cache-type-v")}, flash_attn, with_reason);
}

PairCheck check_pair(const EngineSpec& engine, const BackendSpec& backend, const ModelSpec& model, const std::string& build,
                     const NamedType& k, const NamedType& v, bool flash_attn, bool with_reason) {
  PairCheck out;
  const std::string &type_k = k.name, &type_v = v.name;
  const GgmlType &tk = k.type, &tv = v.type;
  // src/llama-context.cpp llama_init_from_model: an MLA cache without V reads V as a view of K, so the
  // model "does not support different K and V cache types" (seen refusing in tests/validation).
  if (model.mla && !model.mla->legacy && engine.rule_holds("mla_v_less") && type_k != type_v) {
    if (with_reason) out.reason = fmt::format("{} does not support different K and V cache types (MLA: V is a view of K)", model.name);
    return out;
  }
  // src/llama-context.cpp: "quantized V cache requires flash_attn" (V is stored transposed without FA);
  // the check is on the parameter, so it holds even for models without attention layers.
  if (tv.quantized() && !flash_attn) {
    if (with_reason) out.reason = "quantized V cache (" + type_v + ") requires flash attention";
    return out;
  }
  for (const GgmlType* t : {&tk, &tv}) {
    const int dim = t == &tk ? model.head_dim_k : model.head_dim_v;
    if (t->quantized() && dim % t->block != 0) {
      if (with_reason) out.reason = fmt::format("{} needs the head size ({}) to be a multiple of {}", t->name, dim, t->block);
      return out;
    }
  }
  out.ok = true;
  if (!flash_attn) return out;

  // Flash-attention kernels: a missing kernel makes the scheduler run FLASH_ATTN_EXT on the CPU
  // (-fa on) or fail at start with a quantized V (-fa auto).
  const bool all_quants = build == "fa-all-quants";
  const auto& types = all_quants ? backend.fa_types_all_quants : backend.fa_types_default;
  const bool same_size_kernel = model.head_dim_k == model.head_dim_v &&
                                std::find(backend.fa_head_sizes.begin(), backend.fa_head_sizes.end(), model.head_dim_k) !=
                                    backend.fa_head_sizes.end();
  const bool pair_kernel = std::find(backend.fa_head_pairs.begin(), backend.fa_head_pairs.end(),
                                     std::pair<int, int>{model.head_dim_k, model.head_dim_v}) != backend.fa_head_pairs.end();
  // the kernel that is missing, as words when they are asked for (the ranker checks every pair and reads few reasons)
  auto missing = [&](auto&& words) {
    out.ok = false;
    out.slow = true;
    if (with_reason) out.reason = words() + "; attention would run on the CPU";
    return std::move(out);
  };
  if (!backend.fa_head_sizes.empty() && !same_size_kernel && !pair_kernel)
    return missing([&] { return fmt::format("no {} flash-attention kernel for head size {}", backend.name, model.head_dim_k); });
  if (!contains(types, type_k) || !contains(types, type_v)) {
    const std::string& bad = !contains(types, type_k) ? type_k : type_v;
    if (with_reason && !all_quants && contains(backend.fa_types_all_quants, bad)) out.needs.push_back("GGML_CUDA_FA_ALL_QUANTS build");
    return missing([&] { return fmt::format("no {} flash-attention kernel for {}", backend.name, bad); });
  }
  if (type_k != type_v && !(all_quants ? backend.fa_mixed_all_quants : backend.fa_mixed_default)) {
    if (with_reason && !all_quants && backend.fa_mixed_all_quants) out.needs.push_back("GGML_CUDA_FA_ALL_QUANTS build");
    return missing([&] {
      return backend.fa_mixed_all_quants
                 ? fmt::format("a default {} build has flash-attention kernels only for same-type K/V pairs", backend.name)
                 : fmt::format("{} has flash-attention kernels only for same-type K/V pairs", backend.name);
    });
  }
  if (type_k != type_v && backend.fa_mixed_slow) {
    out.ok = false;
    out.slow = true;
    if (with_reason) out.reason = fmt::format("mixed K/V types run on {} but off the fused fast path", backend.name);
  }
  return out;
}

// A word for a POSIX shell: as it is when it holds no character the shell would read, else in single quotes.
std::string shell_quoted(const std::string& word) {
  if (!word.empty() && word.find_first_of(" \t'\"$`\\!*?&;|<>(){}[]~#") == std::string::npos) return word;
  std::string quoted = "'";
  for (char ch : word) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

// The file to load: the GGUF the user gave (its first split, which llama.cpp follows to the rest), quoted for the
// shell when it needs it; else the name a catalog model's GGUF is published under.
std::string gguf_file_name(const ModelSpec& model, const std::string& weights) {
  if (model.file_paths.empty() || model.file_tensors.empty()) return model.name + "-" + weights + ".gguf";
  return shell_quoted(model.file_paths.front());
}

// llama-server's model flag and value: a remote model as llama.cpp fetches it itself (-hf repo:quant, -mu URL).
std::string model_flag(const ModelSpec& model, const std::string& weights) {
  if (model.remote && !model.remote->llama_flag.empty()) return model.remote->llama_flag + " " + shell_quoted(model.remote->llama_value);
  return "-m " + gguf_file_name(model, weights);
}

std::string launch_line(const ModelSpec& model, const Option& o, const Resolved& r, int default_ubatch, int default_batch) {
  std::string line = fmt::format("llama-server {} -c {} -np {}", model_flag(model, o.weights), o.ctx_size, r.n_parallel);
  if (r.kv_unified) line += " -kvu";
  // kvplan owns placement: explicit -ngl with llama-server's own --fit turned off, so fit neither
  // moves layers nor shrinks the context behind the plan's back (common/fit.cpp).
  const int ngl = !r.n_gpu_layers || *r.n_gpu_layers < 0 || *r.n_gpu_layers > model.layers ? std::max(99, model.layers + 1) : *r.n_gpu_layers;
  line += fmt::format(" -fa {} -ctk {} -ctv {}", o.flash_attn ? "on" : "off", o.cache_type_k, o.cache_type_v);
  line += r.placement == "kvplan" ? fmt::format(" -ngl {} --fit off", ngl) : fmt::format(" --fit on --fit-target {}", r.fit_target_mib);
  if (r.n_cpu_moe) line += *r.n_cpu_moe < 0 ? " --cpu-moe" : fmt::format(" --n-cpu-moe {}", *r.n_cpu_moe);
  if (!r.rpc_endpoints.empty()) {
    std::string rpc;
    for (const auto& e : r.rpc_endpoints) rpc += (rpc.empty() ? "" : ",") + e;
    line += " --rpc " + shell_quoted(rpc);
  }
  for (const auto& ot : r.override_tensors) line += " -ot " + ot;
  if (!r.tensor_split.empty()) {
    std::string ts;
    for (double v : r.tensor_split) ts += (ts.empty() ? "" : ",") + fmt::format("{:g}", v);
    line += " -ts " + ts;
  }
  if (r.draft_max > 0) {
    // a plain draft model needs its type named (common/arg.cpp infers only MTP/DFlash drafts from the file)
    line += fmt::format(" -md {} --spec-type draft-simple -ctkd {} -ctvd {}", r.draft_file, r.draft_type_k, r.draft_type_v);
    if (r.n_gpu_layers_draft) line += fmt::format(" -ngld {}", *r.n_gpu_layers_draft);
    if (!r.draft_device.empty()) line += " -devd " + r.draft_device;
    if (r.draft_max != 3) line += fmt::format(" --spec-draft-n-max {}", r.draft_max);
  }
  if (!r.mmproj_file.empty()) line += fmt::format(" --mmproj {}{}", r.mmproj_file, r.mmproj_offload ? "" : " --no-mmproj-offload");
  if (r.n_ubatch != default_ubatch) line += fmt::format(" -ub {}", r.n_ubatch);
  if (r.n_batch != default_batch) line += fmt::format(" -b {}", r.n_batch);
  if (r.swa_full) line += " --swa-full";
  if (o.beyond_native && model.rope_scaling) {
    line += fmt::format(" --rope-scaling {} --rope-scale {:g}", model.rope_scaling->type, model.rope_scaling->factor);
    if (model.rope_scaling->type == "yarn") line += fmt::format(" --yarn-orig-ctx {}", model.rope_scaling->orig_ctx);
  }
  for (const auto& a : r.server_args) line += " " + shell_quoted(a);
  return line;
}

std::vector<Launch> launch_lines(const ModelSpec& model, const Option& o, const Resolved& r, int default_ubatch, int default_batch) {
  Option one = o;
  one.ctx_size = o.ctx_per_slot;
  Resolved single = r;
  single.n_parallel = 1;
  single.kv_unified = false;
  std::string cli = launch_line(model, one, single, default_ubatch, default_batch);
  const std::string server = "llama-server", slots = " -np 1";
  cli.replace(0, server.size(), "llama-cli");
  if (const auto at = cli.find(slots); at != std::string::npos) cli.erase(at, slots.size());
  // One program's line: their compute differs (llama-server reserves logits for its slots, llama-cli for the ubatch).
  std::vector<Launch> out = {r.program == "llama-cli" ? Launch{"llama-cli", cli} : Launch{"llama-server", launch_line(model, o, r, default_ubatch, default_batch)}};
  // Each host runs tools/rpc/rpc-server first (-H binds it beyond loopback, -p the port the main line names). Without
  // -d it offers every accelerator of its host, so an entry stands for a host with one GPU (or one server per GPU).
  for (size_t i = 0; i < r.rpc_endpoints.size(); ++i) {
    const std::string& e = r.rpc_endpoints[i];
    const auto colon = e.rfind(':');
    out.push_back({fmt::format("rpc-server{}", i), fmt::format("rpc-server -H 0.0.0.0 -p {}  # on {}", e.substr(colon + 1), e.substr(0, colon))});
  }
  return out;
}

}  // namespace kvplan::engines

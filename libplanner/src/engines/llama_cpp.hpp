// llama.cpp's rules on what it will start, and the command line for a plan.
#pragma once
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan::engines {

struct PairCheck {
  bool ok = false;     // the engine starts with this configuration on the fast path
  bool slow = false;   // it starts, but attention leaves the fast path (CPU fallback / unfused)
  std::string reason;  // why not, or why slow (empty when not asked for)
  std::vector<std::string> needs;  // what would make it run (empty when the reason is not asked for)
};

// Quantized V needs flash attention (llama-context.cpp); quantized K/V needs a head size that divides
// into the type's block; flash attention needs a kernel for the pair and head size on the backend
// (CUDA: ggml-cuda/fattn.cu ggml_cuda_get_best_fattn_kernel). with_reason: the reason and the needs are written.
PairCheck check_pair(const EngineSpec& engine, const BackendSpec& backend, const ModelSpec& model, const std::string& build,
                     const std::string& type_k, const std::string& type_v, bool flash_attn, bool with_reason = true);
// The same with the types found already: a cache type as asked for (its name, matched case-insensitively) and found.
struct NamedType {
  const std::string& name;
  const GgmlType& type;
};
PairCheck check_pair(const EngineSpec& engine, const BackendSpec& backend, const ModelSpec& model, const std::string& build,
                     const NamedType& k, const NamedType& v, bool flash_attn, bool with_reason);

// The llama-server command for an option. Every line carries -np (llama-server's own default is
// four unified slots) and an explicit -fa.
std::string launch_line(const ModelSpec& model, const Option& option, const Resolved& resolved, int default_ubatch,
                        int default_batch);

// Both lines for an option: llama-server (the main one) and llama-cli (one conversation of the
// per-slot context: llama-cli has no slots).
std::vector<Launch> launch_lines(const ModelSpec& model, const Option& option, const Resolved& resolved, int default_ubatch,
                                 int default_batch);

// The GGUF file name kvplan writes in launch lines, and its inverse for pasted command lines.
std::string gguf_file_name(const ModelSpec& model, const std::string& weights);

}  // namespace kvplan::engines

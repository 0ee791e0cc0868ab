// kvplan/catalog.hpp — the data the planner reads: models, GPUs, engine rules, weight formats,
// tasks and quality priors. Loaded from YAML in data/ (embedded at build time) plus optional
// override directories; see data/README.md for the schema of each file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvplan/checked.hpp"

namespace kvplan {

// ---------- models ----------
struct RopeScaling {
  bool operator==(const RopeScaling&) const = default;
  std::string type;    // "yarn" or "linear"
  double factor = 1;
  int orig_ctx = 0;
};

struct SlidingWindow {
  bool operator==(const SlidingWindow&) const = default;
  int window = 0;   // n_swa (the chunk size for chunked attention)
  int pattern = 0;  // llama.cpp set_swa_pattern: layer il is sliding iff il % pattern < pattern - 1
  bool chunked = false;  // LLAMA_SWA_TYPE_CHUNKED (Llama 4): same cache sizing, other mask
};

// Multi-head latent attention (DeepSeek V2/V3, Kimi K2, GLM-4.7-Flash): the cache holds the
// compressed latent (kv_lora_rank) and the rope part of K, one "head" per layer.
struct Mla {
  bool operator==(const Mla&) const = default;
  int kv_lora_rank = 0;
  int rope_dim = 0;     // qk_rope_head_dim
  int nope_dim = 0;     // qk_nope_head_dim (legacy MHA cache only)
  int v_head_dim = 0;   // (legacy MHA cache only)
  int q_lora_rank = 0;  // 0: the query is projected directly (DeepSeek-V2-Lite); else through a q_lora_rank bottleneck
  bool legacy = false;  // a GGUF converted without MLA metadata: llama.cpp caches full MHA K and V
  // DeepSeek Sparse Attention (DeepSeek-V3.2, arch deepseek32): the lightning indexer of every layer, its query heads,
  // key length and how many cached tokens it keeps (GGUF attention.indexer.*; config.json index_*). 0: no indexer.
  int indexer_heads = 0, indexer_key_length = 0, indexer_top_k = 0;
};

// Recurrent state (llama-memory-recurrent.cpp): f32 per sequence, independent of context.
struct Recurrent {
  bool operator==(const Recurrent&) const = default;
  std::string kind;  // mamba | mamba2 | gdn | rwkv6 | rwkv7 | lfm2
  int d_conv = 0, d_inner = 0, d_state = 0, n_group = 0;  // Mamba, Mamba2, gated delta-net
  int dt_rank = 0;                                      // Mamba2 heads (ssm.time_step_rank); 0: d_inner / 64
  int head_size = 0, token_shift_count = 0;             // RWKV
  int l_cache = 0;                                      // LFM2 short convolution
  int attention_every = 0, attention_offset = 0;        // hybrid: layer il is attention iff il % every == offset
  std::vector<int> attention_layers;                    // hybrid: explicit attention layers (overrides every/offset)
  std::vector<int> ffn_only_layers;                     // hybrid: layers with an FFN only, neither KV nor state (Nemotron-H)
  bool parallel = false;                                // every layer has attention KV and this state (Falcon-H1)
};

// One weight tensor as stored in a GGUF (a file's own, or one the recipe predicts).
struct WeightTensor {
  bool operator==(const WeightTensor&) const = default;
  std::string name;   // llama.cpp name, e.g. "blk.3.attn_v.weight"
  std::string type;   // ggml type
  std::int64_t ne0 = 0, nrows = 0;
  bool on_host = false;  // input-layer tensors stay in host memory with full offload
};

struct Moe {
  bool operator==(const Moe&) const = default;
  int experts = 0;
  int experts_used = 0;
  int expert_ff = 0;
  int shared_ff = 0;
  int dense_lead = 0;  // leading layers with a dense FFN of width ff (DeepSeek first_k_dense_replace)
  int layer_step = 1;  // past them, layer il is MoE iff (il + 1) % layer_step == 0, else dense of width ff
                       // (GGUF interleave_moe_layer_step; Llama 4 Maverick: 2)
};

struct ModelSpec {
  bool operator==(const ModelSpec&) const = default;
  std::string id, name, hf_id, arch, family, source, note;
  std::string license, license_source;  // a data/licenses.yaml id and where it is stated ("" for a model read from a file)
  std::vector<std::string> aliases;
  std::int64_t params = 0;
  int layers = 0, embd = 0, heads = 0, kv_heads = 0, head_dim_k = 0, head_dim_v = 0, ff = 0, vocab = 0;
  bool tied_embeddings = false, qkv_bias = false, qk_norm = false, post_norms = false, attn_sinks = false;
  bool rope = true;  // rotary positions in the attention layers (Granite 4.0-H hybrids: none, NoPE)
  int ctx_native = 0;
  int ctx_extended = 0;  // 0 when the model has no documented rope-scaled maximum
  std::optional<RopeScaling> rope_scaling;
  std::optional<SlidingWindow> swa;
  std::optional<Moe> moe;
  std::optional<Mla> mla;
  std::optional<Recurrent> recurrent;
  std::vector<int> kv_heads_per_layer;  // GGUF head_count_kv arrays; empty: kv_heads everywhere (0: no KV)
  std::vector<int> sliding_layers;      // GGUF sliding_window_pattern arrays (1 = sliding); empty: swa.pattern
  int head_dim_k_swa = 0, head_dim_v_swa = 0;  // per-layer head sizes of sliding layers (0: same as full)
  int shared_kv_from = 0;               // Gemma 3n n_layer_kv_from_start: later layers reuse a cache
  std::vector<int> ff_per_layer;        // GGUF feed_forward_length arrays (Gemma 4 E2B: double-wide FFN in its KV-shared
                                        // layers, convert use_double_wide_mlp); empty: ff everywhere
  bool k_eq_v = false;                  // full-attention layers have no attn_v; V is the K projection (Gemma 4
                                        // attention_k_eq_v; src/models/gemma4.cpp: wv TENSOR_NOT_REQUIRED, Vcur = Kcur)
  int per_layer_embd = 0;               // Gemma 4 E2B/E4B per-layer input width per layer (GGUF
                                        // embedding_length_per_layer_input, config hidden_size_per_layer_input; 0: none)
  // Trailing NextN/MTP blocks (GGUF nextn_predict_layers) that the main context neither loads nor caches: b10454
  // skips their tensors without load_mtp and create_memory's filters keep il < n_layer() (Qwen3-Next, Qwen3.5/3.6).
  // They still count in `layers` (n_layer_all), which -ngl placement counts.
  int mtp_layers = 0;
  // ggml type the released checkpoint stores its routed experts in ("mxfp4": gpt-oss). Published GGUFs keep it
  // at every file type, so the recipe leaves ffn_*_exps in it (data/weights/gguf_recipes.yaml native_experts).
  std::string native_expert_type;

  // Read from a file (kvplan --model file.gguf): the exact tensors and the file's weight format.
  std::vector<WeightTensor> file_tensors;
  std::string file_format;             // GGUF general.file_type as a format id ("" if none)
  std::string file_quant_label;        // a custom mix named in the file name ("UD-Q4_K_XL": Unsloth Dynamic), else ""
  std::vector<std::string> file_paths; // every split
  std::vector<std::string> fields_used, fields_assumed;  // config.json input: what was read and what was assumed
  // Read over the network (the remote adapter, net/): where from, and how the launch lines name it instead of
  // a local file. kind: "hub" (a Hugging Face repo), "url" (a GGUF by URL) or "ollama" (a registry tag).
  struct Remote {
    bool operator==(const Remote&) const = default;
    std::string kind, id;                // id: what --model said, e.g. unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M
    std::string llama_flag, llama_value; // llama-server's model flag: -hf repo:quant, -mu URL, -m blob ("" = none)
    std::string ollama_from;             // a Modelfile's FROM: hf.co/repo:quant, the Ollama tag ("" = ./file.gguf)
  };
  std::optional<Remote> remote;

  bool is_sliding(int il) const {
    if (!sliding_layers.empty()) return il < static_cast<int>(sliding_layers.size()) && sliding_layers[il] != 0;
    return swa && swa->pattern > 1 && il % swa->pattern < swa->pattern - 1;
  }
  bool is_mtp(int il) const { return mtp_layers > 0 && il >= layers - mtp_layers; }
  // llama.cpp's rule (src/llama-model.cpp create_tensors, LLM_ARCH_LLAMA4; src/models/ernie4-5-moe.cpp):
  // il >= n_layer_dense_lead && (il + 1) % n_moe_layer_step == 0.
  bool is_moe_layer(int il) const {
    return moe && il >= moe->dense_lead && (moe->layer_step <= 1 || (il + 1) % moe->layer_step == 0);
  }
  int moe_layer_count() const {
    int n = 0;
    for (int il = 0; il < layers; ++il) n += is_moe_layer(il) ? 1 : 0;
    return n;
  }
  // The widest FFN a token runs through: the routed experts it uses plus the shared expert on MoE layers, ff on
  // dense layers (closed-form compute estimates size their FFN peak by it).
  int ff_at(int il) const { return ff_per_layer.empty() ? ff : ff_per_layer.at(static_cast<size_t>(il)); }
  int widest_dense_ff() const { return ff_per_layer.empty() ? ff : *std::max_element(ff_per_layer.begin(), ff_per_layer.end()); }
  std::int64_t widest_ffn() const {
    if (!moe) return widest_dense_ff();
    const std::int64_t routed = static_cast<std::int64_t>(moe->expert_ff) * moe->experts_used + moe->shared_ff;
    return moe_layer_count() < layers ? std::max<std::int64_t>(routed, widest_dense_ff()) : routed;
  }
  bool is_ffn_only(int il) const {
    return recurrent && std::find(recurrent->ffn_only_layers.begin(), recurrent->ffn_only_layers.end(), il) != recurrent->ffn_only_layers.end();
  }
  bool is_recurrent(int il) const {
    if (!recurrent || recurrent->parallel || is_mtp(il) || is_ffn_only(il)) return false;
    if (!recurrent->attention_layers.empty())
      return std::find(recurrent->attention_layers.begin(), recurrent->attention_layers.end(), il) == recurrent->attention_layers.end();
    if (recurrent->attention_every > 0) return il % recurrent->attention_every != recurrent->attention_offset;
    return true;
  }
  int kv_heads_at(int il) const {
    if (is_mtp(il) || is_ffn_only(il)) return 0;
    return kv_heads_per_layer.empty() ? kv_heads : kv_heads_per_layer.at(static_cast<size_t>(il));
  }
  int max_ctx() const { return ctx_extended > 0 ? ctx_extended : ctx_native; }
};

// A vision projector (--mmproj): a clip GGUF read from its header (tools/mtmd/clip-impl.h keys).
struct ProjectorSpec {
  std::string path, projector_type;
  std::vector<WeightTensor> tensors;
  int image_size = 0, patch_size = 0, embd = 0, ff = 0, heads = 0, layers = 0;
  int n_patches() const { return patch_size > 0 ? (image_size / patch_size) * (image_size / patch_size) : 0; }
};

// ---------- GPUs ----------
struct GpuSpec {
  bool operator==(const GpuSpec&) const = default;
  std::string id, name, vendor, backend, memory_kind, total_source, compute_capability, arch, source;
  std::vector<std::string> aliases;
  std::int64_t total_mib = 0;
  std::int64_t working_set_mib = 0;  // unified memory only
  double bandwidth_gbs = 0;
  double fp16_tflops = 0;  // dense FP16 tensor throughput, FP32 accumulate (vendor whitepaper; 0: unknown)
  bool unified() const { return memory_kind == "unified"; }
};

// macOS's default GPU working set (MTLDevice.recommendedMaxWorkingSetSize, what llama.cpp's Metal backend may use) for a
// Mac with `ram_mib` of unified memory: a fixed fraction of RAM per size band, rounded down to a MiB. The bands are
// measurements (llama.cpp --list-devices 'MTL0: Apple ... (N MiB' on macOS 15/26), listed in data/gpus.yaml's Apple
// section; sizes between two measured bands take the lower band's fraction.
std::int64_t metal_default_working_set_mib(std::int64_t ram_mib);

// ---------- llama.cpp engine rules ----------
struct GgmlType {
  bool operator==(const GgmlType&) const = default;
  std::string name;
  int id = 0;
  int block = 1;
  int bytes = 0;  // per block
  bool quantized() const { return block > 1; }
  // ggml_row_size; block and bytes are positive (checked where the engine's data is read)
  std::int64_t row_size(std::int64_t n) const {
    if (block <= 0) throw InputError("ggml_types." + name + ".block", std::to_string(block), "must be positive");
    return checked_mul(n / block, bytes, "tensor row size");
  }
};

struct Estimate {  // a closed-form estimate: typical value and the upper bound the fit check uses
  bool operator==(const Estimate&) const = default;
  double typical_mib = 0;
  double high_mib = 0;
};

struct BackendSpec {
  bool operator==(const BackendSpec&) const = default;
  std::string id, name;
  int alignment = 32;          // buffer alignment
  int matrix_row_padding = 0;  // CUDA MATRIX_ROW_PADDING (0 = none)
  bool verified = false;       // kernel rules checked against source
  std::vector<std::string> fa_types_default;    // types with flash-attention kernels on a default build
  std::vector<std::string> fa_types_all_quants; // with GGML_CUDA_FA_ALL_QUANTS
  bool fa_mixed_default = false;                // mixed K/V pairs have kernels on a default build
  bool fa_mixed_slow = false;                   // mixed pairs run, but off the fast path
  bool fa_mixed_all_quants = true;              // mixed pairs have kernels with GGML_CUDA_FA_ALL_QUANTS (never on Metal)
  std::vector<int> fa_head_sizes;                    // K = V head sizes with a flash-attention kernel
  std::vector<std::pair<int, int>> fa_head_pairs;    // K != V head sizes with one (MLA 576/512, …)
  Estimate context;        // driver context
  Estimate pool;           // allocator pool slack
  std::int64_t blas_workspace_mib = 0;
  std::int64_t blas_workspace_mib_hopper = 0;
  double compute_rel_error = 0.1;  // estimate error of the compute buffer
  std::string source;
};

struct BuildRule {  // a rule that changed across llama.cpp builds, with the build range it holds for
  bool operator==(const BuildRule&) const = default;
  std::string rule, value, source;
  int from_build = 0, until_build = 0;  // until 0 = still holds
};

struct EngineSpec {
  bool operator==(const EngineSpec&) const = default;
  std::string id, name, build_name, build_source, vendored_by;
  int build = 0;
  std::vector<GgmlType> ggml_types;
  struct ArchRule {
    bool operator==(const ArchRule&) const = default;
    int swa_pattern = 0;
    bool chunked = false;
    int window_fixed = 0;         // the window the engine sets whatever the file says (0: attention.sliding_window)
    bool mla = false;
    std::string recurrent;        // state kind, "" for none
    std::string attention;        // hybrid attention layers: "kv_heads" | "interval"
    int attention_interval = 0;
    bool gated_query = false;     // the query projection also yields an output gate (2 · n_head · head_dim rows)
    std::string graph;            // the reserve graph kvplan models node by node: "qvk" | "qkv" (projection order); "" none
    std::string moe_gating;       // expert weights: "softmax" (normalised top-k probabilities) | "topk_softmax" | "sigmoid_bias"
    bool shared_expert_gate = false;  // the shared expert's output is scaled by a sigmoid gate (Qwen2-MoE, Qwen3-Next)
    bool outputs_after_norm = false;  // output rows are selected after the final norm, not in the last layer
    std::string rope_switch_key;      // GGUF key that turns RoPE off (Granite: rope.scaling.finetuned); "" none
    bool residual_scale = false;      // layer outputs are scaled before the residual ADD (Granite residual_multiplier)
    bool nextn_skipped = false;       // the last nextn_predict_layers blocks' tensors are not loaded (TENSOR_SKIP); their KV is
    bool tied_output_copy = false;    // a tied output is created before token_embd: a second tensor even in the same buffer
    int kv_from_start = 0;            // hard-coded n_layer_kv_from_start: later layers reuse earlier caches (0: none)
    int per_layer_input = 0;          // per-layer input width per layer (Gemma 3n n_embd_altup; 0: none)
    int altup = 0;                    // AltUp streams of the hidden state (Gemma 3n n_altup; 0: none)
    bool mtp_skipped = false;         // trailing nextn_predict_layers blocks are neither loaded nor cached (Qwen3-Next/3.5)
    bool dsa_indexer = false;         // MLA plus the DSA lightning indexer and its own key cache (deepseek32)
    std::string family;
  };
  std::map<std::string, ArchRule> archs;                 // architectures kvplan sizes
  std::map<std::string, std::string> unmodelled_archs;   // refused, with the reason
  const ArchRule* arch(const std::string& name) const {
    auto it = archs.find(name);
    return it == archs.end() ? nullptr : &it->second;
  }
  std::vector<std::string> cache_types;          // what the engine accepts (-ctk/-ctv)
  std::vector<std::string> cache_types_offered;  // what the ranker tries when nothing is pinned
  std::map<std::string, std::string> quant_fallback;  // k-quant type -> type used when ne0 % 256 != 0
  int ctx_pad = 256;
  int ctx_pad_legacy_no_fa = 32;  // before build rule ctx_pad_256: padding without flash attention
  int default_ubatch = 512, default_batch = 2048;
  std::vector<BackendSpec> backends;
  std::vector<BuildRule> build_rules;
  std::int64_t margin_mib = 0;
  std::string margin_source;
  // Every flag llama-server accepts at this build (data/engines/llama.cpp-server-flags.yaml, written from its
  // common/arg.cpp): a pasted launch line may carry any of them. `kept` flags change no memory kvplan plans and go
  // back on the launch line as given; the others change memory kvplan does not size, and `reason` says how.
  struct ServerFlag {
    bool operator==(const ServerFlag&) const = default;
    std::vector<std::string> names;
    int values = 0;  // values that follow the flag
    bool kept = true;
    std::string reason;
  };
  std::vector<ServerFlag> server_flags;
  const ServerFlag* server_flag(const std::string& name) const {
    for (const auto& f : server_flags)
      if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
    return nullptr;
  }
  double weights_rel_error = 0;           // upper bound of recipe-based weight estimates, as a fraction
  double weights_rel_error_fallback = 0;  // upper bound of params × bits-per-weight estimates

  const GgmlType& type(const std::string& name, const std::string& field) const;
  const BackendSpec& backend(const std::string& id) const;
  bool rule_holds(const std::string& rule) const;  // for this engine's build
};

// ---------- GGUF weight formats ----------
struct TensorTypeRule {
  bool operator==(const TensorTypeRule&) const = default;
  std::vector<std::string> tensors;  // llama.cpp names without "blk.N.", e.g. attn_v, ffn_down, output
  std::string type;
  std::string layers = "all";        // all | more_bits | first_eighth | first_sixteenth | first_n | middle
  int first_n = 0;
  int min_gqa = 0;      // when n_head / n_head_kv >= this
  int experts = -1;     // when n_expert == this
  int min_experts = 0;  // when n_expert >= this (IQ1/IQ2 attn_v: "n_gqa() >= 4 || n_expert >= 4")
  int n_layer = 0;      // when the model has exactly this many layers (llama.cpp LLM_TYPE_70B)
};

struct WeightFormat {
  bool operator==(const WeightFormat&) const = default;
  std::string id, base_type, source, quality_source;
  int ftype = -1;
  std::vector<TensorTypeRule> rules;  // the last matching rule wins (llama_tensor_get_type's overrides)
  double rel_loss = 0;                // measured PPL increase vs f16, fraction, on the reference model
  bool rel_loss_estimate = false;
  double bpw_llama31_8b = 0;
  double size_gib_llama31_8b = 0;
  bool offered = true;                // enumerated by default
  std::string native_only;            // planned only for models whose native_expert_type is this (MXFP4: gpt-oss)
  // Formats of other engines (RuntimeProfile::weight_formats), sized from the parameter count:
  double bpw = 0, head_bpw = 0, embed_bpw = 0;  // linear layers, output head, token embeddings
  bool embed_on_host = false;                   // token embeddings in system RAM (ExLlama)
  bool experts_only = false;                    // bpw applies to MoE experts; other linear layers at head_bpw (MXFP4)
  std::string quality_as, flag;                 // the GGUF format whose measured loss stands in; launch flag
};

// ---------- other engines (data/engines/<id>.yaml `runtime:`) ----------
// What kvplan needs to plan for an engine other than llama.cpp: the cache types it accepts with their
// storage per element, its weight formats, how it pages the cache and how it budgets memory.
struct RuntimeCacheType {
  bool operator==(const RuntimeCacheType&) const = default;
  std::string id;                 // as the engine spells it (--kv-cache-dtype fp8, cache_mode Q6, --kv-bits 4)
  double k_bytes = 2, v_bytes = 2;  // storage per element, scales included
  std::string prior_k, prior_v;   // data/priors/prior.yaml type ids for the K and V roles
  bool offered = true;            // enumerated when nothing is pinned
  std::string source;
  bool quantized() const { return k_bytes < 2 || v_bytes < 2; }
};

struct MiBRange {
  bool operator==(const MiBRange&) const = default;
  double typical = 0, high = 0;
};

struct RuntimeProfile {
  bool operator==(const RuntimeProfile&) const = default;
  std::string id, name, kind, version, source;  // kind: ollama | vllm | sglang | exllamav2 | exllamav3 | mlx
  std::vector<std::string> aliases, backends, rules;
  bool same_type_kv = true;       // one cache type for K and V
  bool mix_unquantized = true;    // an unquantized side may pair with a quantized one
  bool unified_kv = true;         // one pool for every sequence (false: a cache per slot)
  int token_granularity = 1;      // the cache holds whole blocks/pages/steps of this many tokens
  std::string sliding = "full";   // sliding layers: full | window_plus_batch (vLLM) | rotating (MLX)
  bool quantized_sliding = true;  // a sliding layer's cache can be quantized
  bool temp_fp16_layer = false;   // quantized cache: fp16 K and V of one layer as a temporary
  double memory_fraction = 0;     // the engine's share of TOTAL device memory (0: everything)
  bool fraction_covers_activations = true;  // false (SGLang): the fraction covers weights + KV only
  std::string memory_fraction_source;
  int activation_tokens = 0, activation_tokens_large = 0;  // the batch the activation peak is sized for
  std::string activation_source;
  double sampler_bytes_per_logit = 8;  // the profile's sampler: bytes per row and vocabulary entry
  int moe_chunk_tokens = 0;            // vLLM's fused MoE workspace over chunks of this many tokens (0: not modelled)
  std::string sampler_source;
  MiBRange context, graphs;       // CUDA/PyTorch context; CUDA graphs
  std::string overhead_source;
  std::int64_t margin_mib = 0;
  std::string margin_source;
  std::vector<RuntimeCacheType> cache_types;
  std::vector<WeightFormat> weight_formats;  // the engine's own formats (empty: GGUF, as llama.cpp)
  const RuntimeCacheType* cache_type(const std::string& id) const {
    for (const auto& t : cache_types)
      if (t.id == id) return &t;
    return nullptr;
  }
};

// ---------- serving at scale (data/engines/checkpoints.yaml, data/interconnects.yaml) ----------
// A Hugging Face repo holding a catalog model in one of the vLLM/SGLang weight formats.
struct Checkpoint {
  bool operator==(const Checkpoint&) const = default;
  std::string id, model, weights, repo, source;
  bool native = false;  // the model's own release is in this format (no BF16 repo is assumed)
};
// A link between nodes: bandwidth per GPU and the latency of a small all-reduce across two nodes (0: unknown).
struct Interconnect {
  bool operator==(const Interconnect&) const = default;
  std::string id, name, source;
  double gbs = 0, allreduce_latency_us = 0;
};

// ---------- tasks ----------
struct StrictnessBand {
  bool operator==(const StrictnessBand&) const = default;
  int upto = 0;  // 0 = no upper limit
  double factor = 1;
};
struct TaskProfile {
  bool operator==(const TaskProfile&) const = default;
  std::string id, name, metric, summary, source;
  std::vector<std::string> aliases;
  int ctx_target = 0, ctx_min = 0;
  // Speed the task needs to be usable (docs/ranking.md §5): decode tokens per second for one conversation, and the
  // longest acceptable time to the first token of a prompt as long as the planned context (0: no such floor).
  double decode_floor_tps = 0;
  double ttft_max_s = 0;
  std::string speed_source;
  std::vector<StrictnessBand> strictness;
  double factor_at(int ctx) const;
};

// ---------- quality prior ----------
// The fitted prior of data/priors/prior.yaml (docs/priors.md; tools/fit_priors.py writes it).
struct TypeSensitivity {   // one cache type
  bool operator==(const TypeSensitivity&) const = default;
  std::string type, engine;
  double bits = 16;         // storage bits per element, scales included
  double k_bits = 16;       // Gaussian-equivalent bits in the K role (the loss curve's argument)
  double v_bits = 16;       // ... in the V role (differs for exl2_q6: K 8-bit, V 4-bit)
  std::string rotation = "engine";  // engine: rotated when the engine rotates; builtin | robust: always
  std::string codebook = "none";    // the rounding grid's kind: absmax | affine | nonuniform | lloyd_max | float ...
  int group = 0;            // elements per scale (0: per tensor, or unquantized)
  bool planned = true;      // kvplan offers or will offer it (false: only in measurements)
  bool defective = false;   // measured with a known implementation defect: an analog of itself only
  bool quantized() const { return bits < 16; }
  bool always_rotated() const { return rotation != "engine"; }
};
struct FamilyFactor {
  bool operator==(const FamilyFactor&) const = default;
  std::string family;
  double k_low_bits_rot = 1, k_low_bits_norot = 1, all_bits = 1;
  double k_low_bits_max = 6;   // F_K applies when K has at most this many equivalent bits
  std::vector<std::string> k_codebooks;  // ... and its codebook is one the family's own rows measured
  std::string source;
};
// One fitted measurement row, as the bounds of the cells it covers (docs/priors.md §1.4).
struct AnalogRow {
  bool operator==(const AnalogRow&) const = default;
  std::string id, family, k_type, v_type;
  bool rot_k = false;      // K was rotated
  double params_b = 0, ctx = 0;
  double loss = -1;        // measured L_kv (task factor and W divided out); < 0: coverage only
  double predicted = 0;    // the fitted prior's L_kv for the row: loss / predicted is how far off the prior was there
  bool upper = false;      // the measurement is an upper bound
  int k_index = -1, v_index = -1;  // k_type, v_type in PriorParams::types (index_types); -1: looked up by name
  bool own_factor = false;         // the family has a factor of its own (PriorParams::families; index_types)
  int family_index = -1;           // family in PriorParams::analog_families (index_types): compared without its name
};
struct Evidence {
  bool operator==(const Evidence&) const = default;
  std::string id, text, source;
};
struct MeasuredEvidence {  // one measurement row, cited for the option it matches best
  bool operator==(const MeasuredEvidence&) const = default;
  std::string id, k_type, v_type, rotation = "any", family, kind, text, source;  // rotation: yes | no | any; kind: ppl | kld | nll | acc
  double params_b = 0;
  int k_index = -1, v_index = -1;  // as in AnalogRow
};
struct ModelCalibration {  // a user's own measurements of one model (priors::calibrate, docs/priors.md §7)
  bool operator==(const ModelCalibration&) const = default;
  std::string model;       // ModelSpec::id it applies to
  double k_factor = 1, v_factor = 1;      // multiply the K and V terms
  double interval_low = 0, interval_high = 0;  // 0: keep the prior's
  int rows = 0;
  std::vector<std::string> evidence;      // "your measurement: ..." sentences
};
struct PriorParams {
  bool operator==(const PriorParams&) const = default;
  int model_version = 3;
  // reference point and fixed choices
  double bits_ref = 4.5, size_ref_b = 7;
  double size_clamp_high = 10;
  double low_bits = 5;        // context growth applies at or below this many equivalent bits
  double alpha_k_max = 1.5;
  double weight_bpw_high = 6, weight_bpw_mid = 3.5;
  double w_high = 1, w_mid = 1.5, w_low = 2.5;
  double weight_loss_ref_b = 8;
  double band_free = 0.005, band_mild = 0.02, band_noticeable = 0.10;
  // fitted
  double a_k = 0.008, a_v = 0.006, beta_k = 0.83, beta_v = 0.83;
  double r_norot = 9, beta_norot = 1.386;
  double size_exponent_k = 0.5, size_exponent_v = 0.5, size_exponent_norot = 0.5, size_knee_b = 3;
  double ctx_floor = 4096, alpha_k = 0.5, alpha_k_size = 0.6, alpha_v = 0.1;
  double interval_low = 1.0 / 3, interval_high = 3;
  std::vector<TypeSensitivity> types;
  std::vector<FamilyFactor> families;
  std::vector<MeasuredEvidence> measured;
  std::vector<AnalogRow> analogs;
  std::vector<Evidence> evidence;
  std::vector<ModelCalibration> calibrations;
  std::string source;
  const TypeSensitivity& type(const std::string& name) const;
  const FamilyFactor* family(const std::string& name) const;
  const Evidence* find_evidence(const std::string& id) const;
  const ModelCalibration* calibration(const std::string& model_id) const;
  std::vector<std::string> analog_families;  // the analog rows' families, each once (AnalogRow::family_index; index_types)
  // The analog rows by index (ascending), so that a cell's evidence search reads only the rows it may use (index_types):
  // each family's (in analog_families' order); those that can bound a cell (both types known, a measured loss and
  // a prediction), all of them, of each family, and of the families without a factor of their own.
  struct AnalogIndex {
    bool operator==(const AnalogIndex&) const = default;
    std::vector<std::vector<int>> of_family, bounding_of_family;
    std::vector<int> bounding, bounding_without_factor;
    // same_kind_bits(i, j): types[j] against types[i] as the same kind of rounding: bit 0 in the K role, bit 1 in
    // the V role, bits 2-3 the same with any codebook (evidence_bounds.cpp)
    std::vector<unsigned char> kinds;  // types.size() squared, row-major
    size_t n_types = 0;
    unsigned char same_kind_bits(int i, int j) const { return kinds[static_cast<size_t>(i) * n_types + static_cast<size_t>(j)]; }
  };
  AnalogIndex analog_index;
  // Each row's K and V type by position, so that the ranker's evidence search compares no type names (after loading).
  void index_types();
  // The cache type named `name` (at `index` when that is still it), or nullptr; type() throws for an unknown one.
  const TypeSensitivity* type_at(int index, const std::string& name) const;
};

// ---------- published benchmark figures (data/quality/, docs/ranking.md §8) ----------
struct Benchmark {
  bool operator==(const Benchmark&) const = default;
  std::string id, name, metric, source;
  std::vector<std::string> tasks;  // kvplan task ids it informs
  double scale_low = 0, scale_high = 100;
  bool higher_is_better = true;
  // false: its variants are different tests (LiveCodeBench's problem windows, SWE-bench's agent systems), so a
  // variant too rare to link alone is not pooled with the others (docs/ranking.md §8 step 3)
  bool pool_variants = true;
};
struct BenchmarkScore {  // one published figure of one catalog model
  bool operator==(const BenchmarkScore&) const = default;
  std::string model, benchmark, variant, mode, source, date, note;  // variant/mode/note: "" when null
  double value = 0;
  std::string file;  // data file:line it came from (for error messages)
};

// ---------- model licenses (data/licenses.yaml) ----------
struct LicenseSpec {
  bool operator==(const LicenseSpec&) const = default;
  std::string id, name, hub, source;  // hub: the Hugging Face `license:` metadata value ("other" for a custom license)
  bool osi = false;                   // OSI-approved (opensource.org/licenses): what `--license open` accepts
};

// ---------- the catalog ----------
struct Catalog {
  // Every catalog type compares field by field: the build checks that the embedded image (catalog/image.cpp)
  // decodes to exactly the catalog the YAML loader produced.
  bool operator==(const Catalog&) const = default;
  std::vector<ModelSpec> models;
  std::vector<GpuSpec> gpus;
  std::vector<EngineSpec> engines;
  std::vector<WeightFormat> weight_formats;
  std::vector<TaskProfile> tasks;
  std::vector<RuntimeProfile> runtimes;  // engines other than llama.cpp
  std::vector<Checkpoint> checkpoints;
  std::vector<Interconnect> interconnects;
  PriorParams prior;
  std::vector<Benchmark> benchmarks;   // data/quality/*.yaml `benchmarks:`
  std::vector<BenchmarkScore> scores;  // data/quality/*.yaml `scores:`
  std::vector<LicenseSpec> licenses;   // data/licenses.yaml

  // Lookups by id, alias or display name (case- and punctuation-insensitive). Throw InputError
  // with a "did you mean" suggestion naming `field`.
  const ModelSpec& model(const std::string& name, const std::string& field = "--model") const;
  const GpuSpec& gpu(const std::string& name, const std::string& field = "--gpu") const;
  const EngineSpec& engine(const std::string& id, const std::string& field = "--engine") const;
  const WeightFormat& weight_format(const std::string& id, const std::string& field = "--weights") const;
  const TaskProfile& task(const std::string& id, const std::string& field = "--task") const;
  const ModelSpec* find_model(const std::string& name) const;
  // The GPUs `name` can mean: an id or alias; the same with vendor words ("NVIDIA GeForce RTX 4060 Laptop GPU");
  // or a bare model number ("4090"). Empty when unknown, several when ambiguous ("7900").
  std::vector<const GpuSpec*> gpu_matches(const std::string& name) const;
  // An engine other than llama.cpp by id or alias; nullptr for llama.cpp itself. Throws InputError
  // naming `field` for an unknown engine.
  const RuntimeProfile* runtime(const std::string& name, const std::string& field = "--engine") const;
  std::vector<std::string> engine_ids() const;  // llama.cpp first, then the runtimes
  const WeightFormat* find_weight_format(const std::string& id) const;
  // The format an Ollama tag names at its end ("qwen3:30b-a3b-q4_K_M" -> Q4_K_M; Ollama writes fp16 for F16), or nullptr.
  const WeightFormat* ollama_tag_weights(const std::string& tag) const;
  const LicenseSpec* find_license(const std::string& id) const;
};

// The embedded catalog merged with each directory in `extra_dirs` (later wins; entries merged by id,
// field by field). Throws InputError for malformed YAML (field = "file:line").
Catalog load_catalog(const std::vector<std::string>& extra_dirs = {});

// The built-in catalog alone, loaded once.
const Catalog& builtin_catalog();

}  // namespace kvplan

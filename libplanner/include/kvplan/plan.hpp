// kvplan/plan.hpp — the request and the plan: value types and the pure planning functions.
//
//   const auto& catalog = kvplan::builtin_catalog();
//   kvplan::Request req;
//   req.gpu = "24GB"; req.model = "qwen2.5-coder-32b"; req.task = "agentic";
//   kvplan::Plan plan = kvplan::plan(catalog, req);
//   if (plan.fits()) std::cout << kvplan::to_json(plan);
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/units.hpp"

namespace kvplan {

// What was asked. Unset optionals are for the planner to choose.
struct Request {
  std::string model;                 // catalog name/alias/HF id, or a GGUF file name such as
                                     // "Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf" (model + weights) (required)
  std::shared_ptr<const ModelSpec> model_spec;  // a model read from a file (load_model_file); used instead of `model`
  std::optional<std::string> backend;   // override the GPU's backend (cuda, metal, rocm, vulkan, sycl, cpu)
  std::string gpu;                   // catalog GPU name or a size such as "24GB", or "2x24GB" (required)
  std::vector<std::string> extra_gpus;  // --gpu repeated: the other devices in order (CUDA1, CUDA2, …)
  // --rpc host:port=DEVICE,...: llama.cpp rpc-server hosts, each with its device (a catalog GPU or a size); llama.cpp
  // puts them before the local GPUs (src/llama.cpp llama_model_load_from_file_impl: "add RPC servers at the front")
  std::vector<std::string> rpc_servers;
  std::vector<double> tensor_split;  // --tensor-split: proportions per GPU (empty: by free memory, as llama.cpp)
  std::string split_mode = "layer";  // --split-mode layer | none (row is not modelled)
  std::string task = "general";      // data/tasks.yaml id
  std::string engine = "llama.cpp";
  std::string build = "default";     // "default" | "fa-all-quants" (CUDA built with GGML_CUDA_FA_ALL_QUANTS)
  std::optional<std::string> weights;       // GGUF format, e.g. "Q4_K_M"
  std::optional<int> ctx_size;              // tokens, as -c
  std::optional<std::string> cache_type_k;  // -ctk
  std::optional<std::string> cache_type_v;  // -ctv
  std::string flash_attn = "auto";   // on | off | auto (auto: the planner picks per option)
  int n_parallel = 1;                // -np (kvplan's default is one slot; launch lines say so)
  int tensor_parallel = 1;           // vLLM --tensor-parallel-size / SGLang --tp: that many identical GPUs
  // Serving engines (vLLM, SGLang): docs/engines.md "Serving at scale".
  int pipeline_parallel = 1;         // --pipeline-parallel-size / --pp-size: stages holding different layers
  int data_parallel = 1;             // --data-parallel-size / --dp-size: replicas of the whole model
  bool expert_parallel = false;      // vLLM --enable-expert-parallel / SGLang --ep-size: MoE experts split over TP x DP GPUs
  int nodes = 1;                     // machines the tp x pp x dp GPUs are spread over (equal shares)
  std::optional<int> max_num_seqs;   // vLLM --max-num-seqs / SGLang --max-running-requests (default: --parallel above 1, else the engine's)
  int concurrency = 1;               // full-length conversations the KV pool must hold at once (1: the engine's own start-up check)
  std::optional<int> max_batched_tokens;  // vLLM --max-num-batched-tokens / SGLang --chunked-prefill-size (the prefill chunk)
  std::string interconnect;          // the link between nodes (data/interconnects.yaml id; default: the first listed)
  bool kv_unified = false;           // -kvu
  std::optional<int> n_ubatch;       // -ub (engine default 512)
  std::optional<int> n_batch;        // -b  (engine default 2048)
  std::string program = "llama-server";  // the llama.cpp program that will run the plan: llama-server | llama-cli
                                         // (it decides the logits rows, hence the compute buffer, and the launch line)
  std::optional<int> n_outputs_max;  // logits rows a batch may ask for (default: llama-server's n_parallel · (1 + n_draft);
                                     // a library context such as llama-cpp-python's uses n_batch)
  bool swa_full = false;             // --swa-full
  bool allow_slow = false;           // offer pairs that run off the fast path
  std::optional<int> n_gpu_layers;   // -ngl: layers on the GPU (-1 or >= layers + 1: all, with the output layer)
  std::optional<int> n_cpu_moe;      // --n-cpu-moe N: experts of the first N layers in RAM (-1: --cpu-moe, all)
  std::vector<std::string> override_tensors;  // -ot PATTERN=DEVICE (regex over tensor names; CPU, CUDA0, …), first match wins
  std::vector<std::string> server_args;  // llama-server flags of a pasted line that change no planned memory
                                         // (--jinja, --port 8080, …): kept in order, written back on the launch line
  bool fit_placement = false;        // --fit on: llama-server's fit places the layers, kvplan sets its --fit-target
  std::optional<int> fit_target_mib; // --fit-target MiB given by the user: the margin becomes what it leaves
  std::optional<std::string> rope_scaling;  // --rope-scaling: enables the model's documented extension
  std::optional<double> rope_scale;         // --rope-scale: must match the model's factor
  std::optional<int> yarn_orig_ctx;         // --yarn-orig-ctx: must match the model's original context
  std::optional<Bytes> reserve;      // memory kept for the display / other processes
  std::optional<Bytes> free;         // what is actually free on the GPU (replaces total − reserve)
  std::vector<Bytes> free_per_gpu;   // --free auto with several GPUs: each one's free memory, in device order
  std::vector<std::string> gpu_detected;  // --gpu auto: how each device was found ("NVIDIA GeForce RTX 4090 via nvidia-smi")
  std::optional<Bytes> host_ram;     // --ram: the host pool's size (default: unbounded, reported only)
  std::optional<double> host_bandwidth_gbs;  // --ram-bandwidth: host memory bandwidth for the speed estimate (default 60 GB/s)
  // Speculative decoding (llama-server -md): a draft model with its own context (common/speculative.cpp
  // common_speculative_init_result: the main context's parameters with the draft's cache types and layers).
  std::string model_draft;                            // catalog name, GGUF file name, or (CLI/Python) a path
  std::shared_ptr<const ModelSpec> model_draft_spec;  // the draft read from a file
  std::optional<std::string> weights_draft;           // its GGUF format (a catalog draft; default Q8_0, said so)
  std::optional<std::string> cache_type_k_draft;      // -ctkd (default f16)
  std::optional<std::string> cache_type_v_draft;      // -ctvd (default f16)
  std::optional<int> n_gpu_layers_draft;              // -ngld (default all)
  std::optional<int> draft_max;                       // --draft-max: tokens drafted per step (default 3)
  std::shared_ptr<const ProjectorSpec> mmproj;        // --mmproj FILE (load_projector_file)
  bool mmproj_offload = true;                         // --no-mmproj-offload keeps it in RAM
  int top = 5;                       // options to return
  bool max_ctx = false;              // --max-ctx: the largest context, every setting not pinned free (mode max_context)
  bool accept_risk = false;          // --accept-risk: recommend the least-bad option even when every one rates "avoid"
  std::string host_ram_source;       // where host_ram came from ("--ram", "this machine: /proc/meminfo MemTotal"); empty: given
  bool suggest = true;               // look for verified alternatives when nothing acceptable fits (off inside that search)
};

enum class Accuracy { exact, estimate };

// One figure of memory: the bytes the engine allocates, the unpadded tensor bytes, and for
// estimates the upper bound the fit check uses.
struct Figure {
  Bytes bytes = 0;
  Bytes unpadded = 0;
  Bytes high = 0;
  Accuracy accuracy = Accuracy::exact;
  static Figure exact(Bytes padded, Bytes unpadded) { return {padded, unpadded, padded, Accuracy::exact}; }
  static Figure estimate(Bytes typical, Bytes high) { return {typical, typical, high, Accuracy::estimate}; }
};

// A budget is a list of pools. A unified-memory device is one pool (its working-set limit).
struct Pool {
  std::string id;        // "gpu0", "host"
  std::string kind;      // "gpu" | "host" | "unified"
  std::string device;    // display name
  std::string detected;  // --gpu auto: how the device was found on this machine (empty: named by --gpu)
  std::string backend;   // cuda | metal | rocm | vulkan | sycl | cpu
  Bytes capacity = 0;    // what the driver reports (0 = not bounded)
  Bytes reserve = 0;     // display / other processes
  Figure overhead;       // runtime overhead (driver context, BLAS workspace, pool slack)
  Bytes margin = 0;      // safety margin
  bool bounded() const { return capacity > 0; }
  Bytes budget() const { return capacity - reserve - overhead.high - margin; }  // for the plan's own buffers
};

// Every allocation lands in one pool and belongs to one component.
struct Allocation {
  std::string component;  // "main", "draft" (speculative decoding), "mmproj" (vision projector)
  std::string what;       // weights | k_cache | v_cache | swa_k_cache | swa_v_cache | state | compute | output
  std::string pool;
  Figure figure;
};

struct PoolUsage {
  std::string pool;
  Bytes allocations = 0;       // typical bytes of the plan's allocations in this pool
  Bytes allocations_high = 0;  // the same with each estimate's upper bound
  Bytes total = 0;             // allocations + runtime overhead, typical: what the device will hold
  Bytes total_high = 0;        // allocations + overhead at their upper bounds: what the fit check uses
  Bytes headroom = 0;          // capacity − reserve − margin − total_high (negative: does not fit; 0 if unbounded)
};

enum class Risk { free, mild, noticeable, avoid };
const char* risk_name(Risk r);

struct Quality {
  double expected_loss = 0;  // fractional perplexity increase vs f16 weights and f16 cache, task-weighted
  double low = 0, high = 0;  // 80% interval
  double kv_loss = 0;        // cache part (before the task factor)
  double weights_loss = 0;   // weights part (before the task factor)
  double task_factor = 1;
  double weights_factor = 1; // low-bit weights enlarge the cache loss
  Risk risk = Risk::free;
  bool extrapolated = false;          // no measurement of this cache pair on this family: bounded by analogs
  std::vector<std::string> analogs;   // the measurements.csv ids that bound it (empty: none was found)
  std::vector<std::string> evidence;  // sentences naming the measurement and its source
};

// One line (or block) that starts the engine with an option: a command, environment, or config file.
struct Launch {
  std::string name;  // llama-server | llama-cli | ollama-env | modelfile | vllm | sglang | tabby-config | mlx-generate | mlx-server
  std::string text;
};

struct Option {
  std::string weights;       // GGUF format id
  int ctx_size = 0;          // what -c gets (all slots together)
  int ctx_per_slot = 0;      // the longest one conversation can run: n_ctx_seq, or n_ctx with unified KV
  std::string cache_type_k, cache_type_v;
  bool flash_attn = true;
  bool beyond_native = false;  // uses rope scaling
  bool below_task_min = false;
  std::vector<Allocation> allocations;
  std::vector<PoolUsage> pools;
  Quality quality;
  std::vector<std::string> needs;     // e.g. "GGML_CUDA_FA_ALL_QUANTS build"
  std::vector<std::string> warnings;
  std::string reason;                 // one line
  std::string launch;                 // the engine's main launch line (launches.front().text)
  std::vector<Launch> launches;       // every line for this engine (--emit NAME prints one)
  double max_concurrency = 0;         // pooled engines: full-length conversations the KV pool holds (0: n/a)
  std::int64_t kv_pool_tokens = 0;    // vLLM/SGLang: tokens the KV pool holds (vLLM "GPU KV cache size", SGLang max_total_num_tokens)
  // Pipeline stages (vLLM/SGLang with pp > 1): each stage's layers and one of its GPUs' memory; the plan's pool is
  // the tightest stage's GPU.
  struct Stage {
    int first_layer = 0, end_layer = 0;  // [first, end)
    bool embeddings = false, output = false;
    Bytes weights = 0, kv = 0, total_high = 0, headroom = 0;
  };
  std::vector<Stage> stages;
  // Decode speed at full context, memory-bandwidth bound (docs/formulas.md §11): tokens per second for one
  // conversation at typical and low bandwidth efficiency; 0 when a device's bandwidth is unknown (a bare size).
  double decode_tps = 0, decode_tps_low = 0;
  std::string decode_bound;           // the pool that takes most of the time per token
  // Prefill speed of a prompt as long as the planned context (docs/formulas.md §11): compute bound on each GPU
  // (0.8 of its FP16 tensor throughput), RAM-resident weights copied over PCIe per ubatch; 0 when unknown.
  double prefill_tps = 0;
  double decode_relative = 1;         // decode speed relative to the same bytes all in device memory (1: none in RAM)
  double ttft_s = 0;                  // time to the first token of a prompt as long as ctx_per_slot (0: unknown)
  // Placement chosen for this option (kvplan places by default when the model does not fit the GPU): layers on
  // the GPU as -ngl gives them (unset: all), experts of the first N layers in RAM (--n-cpu-moe; unset: none).
  std::optional<int> n_gpu_layers, n_cpu_moe;
  double score = 0;                   // the ranking objective's value (docs/ranking.md §5; higher is better)

  Bytes sum(const std::string& what, const std::string& pool = {}) const;  // typical bytes of that kind (in one pool)
  Bytes kv_total(const std::string& pool = {}) const;  // K, V, their sliding-window parts and recurrent state
  const PoolUsage& usage(const std::string& pool) const;
  bool fits() const;
  // Over the devices (every pool but host RAM): what they hold together, and the tightest one's headroom.
  Bytes device_total() const;
  Bytes device_headroom() const;
};

// What the engine will actually do with the request, whatever option is chosen.
struct Resolved {
  std::string engine, engine_build, backend, build;
  std::vector<std::string> rpc_endpoints;  // host:port of each --rpc server, in device order
  std::string engine_id = "llama.cpp";  // --engine as resolved (llama.cpp, ollama, vllm, sglang, exllamav2, exllamav3, mlx)
  double memory_fraction = 0;           // vLLM --gpu-memory-utilization / SGLang --mem-fraction-static (0: n/a)
  bool backend_verified = true;
  int n_parallel = 1;
  int tensor_parallel = 1;   // GPUs the model is split over (pools then describe one of them)
  int pipeline_stages = 1, data_parallel = 1, nodes = 1;  // vLLM/SGLang: pp stages, replicas, machines
  bool expert_parallel = false;
  int max_num_seqs = 0;      // vLLM --max-num-seqs / SGLang --max-running-requests as launched (0: the engine derives it)
  std::string max_num_seqs_source;  // "--parallel", "--max-num-seqs", or the engine default's source
  int concurrency = 1;       // full-length conversations the KV pool must hold
  int max_batched_tokens = 0;  // the prefill chunk the activation peak is sized for (vLLM --max-num-batched-tokens)
  bool max_batched_tokens_asked = false;  // given by the user: the launch line carries it
  std::string interconnect;  // several nodes: the link between them (data/interconnects.yaml id)
  double interconnect_gbs = 0;  // its bandwidth in GB/s per GPU
  std::vector<double> tensor_split;  // llama.cpp layer split as the launch line gives it (-ts), empty with one GPU
  std::vector<std::string> override_tensors;  // -ot PATTERN=DEVICE as the launch line gives them
  std::vector<std::string> server_args;       // the user's other llama-server flags, re-emitted as given
  std::string program = "llama-server";       // llama-server | llama-cli (llama.cpp engines only)
  bool pipeline_parallel = false;    // several GPUs with every layer offloaded (llama-context.cpp: n_copies 4)
  bool kv_unified = false;
  int n_ubatch = 512, n_batch = 2048;
  int n_outputs_max = 1;     // logits rows of the reserve graph's batch (llama-server: n_parallel · (1 + n_draft))
  bool swa_full = false;
  bool gpu_size_only = false;  // --gpu was a size, not a named card
  std::optional<int> n_gpu_layers;  // as the launch line gives it (unset: all layers)
  std::optional<int> n_cpu_moe;
  std::string placement = "kvplan";  // who places layers: "kvplan" (-ngl, --fit off) | "llama-server --fit"
  std::string draft_file, draft_weights, draft_type_k, draft_type_v;  // the draft model as the launch line gives it
  std::string draft_device;          // with several GPUs the draft is pinned to the main one (-devd CUDA0)
  std::optional<int> n_gpu_layers_draft;
  int draft_max = 0;                 // 0: no draft model
  std::string mmproj_file;           // empty: no projector
  bool mmproj_offload = true;
  int fit_target_mib = 0;            // with llama-server's fit: the --fit-target that keeps kvplan's margins
};

// A verified alternative: a changed request that kvplan re-planned and found acceptable (docs/ranking.md §6).
struct Suggestion {
  std::string summary;            // one line: what changes and what it gives
  Request request;                // the request to re-plan (request_args renders it as CLI arguments)
  std::vector<std::string> args;  // request_args(request)
  Option option;                  // its recommended option
};

struct Plan {
  Request request;
  Resolved resolved;
  const ModelSpec* model = nullptr;   // the catalog's entry, or request.model_spec (kept alive by the request)
  const TaskProfile* task = nullptr;
  std::vector<Pool> pools;
  std::vector<Option> options;        // ranked, best first
  std::string mode;                   // "rank" | "max_context" | "best_types" | "single"
  int target_ctx = 0;                 // the task's target per conversation, capped by the model's allowed window
  std::vector<std::string> warnings;
  std::string nothing_fits;           // why, and what would fit instead (empty when options fit)
  std::vector<std::string> explanation;  // why the recommendation, with evidence
  // "ok": a recommendation to run; "nothing_acceptable": options fit but every one rates "avoid" for the task
  // (--accept-risk takes the least bad); "nothing_fits": no option fits the memory.
  std::string verdict = "ok";
  std::string nothing_acceptable;        // why, and what would make it acceptable (empty unless that verdict)
  std::vector<Suggestion> suggestions;   // verified alternatives (nothing acceptable, nothing fits, a pinned plan)
  bool fits() const { return !options.empty() && options.front().fits(); }
  const Option* recommended() const { return verdict == "ok" && fits() ? &options.front() : nullptr; }
};

// A request as kvplan's command-line arguments (without the program name): what a suggestion re-plans.
std::vector<std::string> request_args(const Request& request);

// The planner: a pure function from catalog and request to plan. Throws InputError for bad input;
// "nothing fits" is a plan with fits() == false and nothing_fits explaining.
Plan plan(const Catalog& catalog, const Request& request);

// The whole plan as the JSON contract of schema/plan.schema.json.
inline constexpr int kSchemaVersion = 4;  // 4: verdict, suggestions, placement and time to first token per option, speed_floor; 3: launch keyed by line name (llama-server, llama-cli, vllm, …), max_concurrency, resolved.engine_id/memory_fraction
std::string to_json(const Plan& plan, int indent = 2);

// A model (catalog entry or file) as JSON: what kvplan knows of it (`kvplan inspect --json`).
std::string model_to_json(const ModelSpec& model, int indent = 2);

}  // namespace kvplan

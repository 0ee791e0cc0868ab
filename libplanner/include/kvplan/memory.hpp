// kvplan/memory.hpp — llama.cpp's memory rules, one function per allocation kind.
// Each function cites the engine source it mirrors in libplanner/src/memory/.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan {

// How llama.cpp sizes the context for a request (llama-context.cpp, llama-kv-cache-iswa.cpp).
struct ContextShape {
  int n_ctx = 0;       // cells in all streams together (PAD(ctx, 256), rounded per stream)
  int n_ctx_seq = 0;   // cells per stream (kv_size)
  int n_stream = 1;    // 1 when unified, else n_seq
  int n_seq = 1;       // n_seq_max = --parallel
  bool unified = false;
  int n_ubatch = 512, n_batch = 2048;
  int swa_cells = 0;   // cells per stream of the sliding-window cache (0 without SWA layers)
  int n_outputs = 0;   // rows the reserve graph computes logits for: min(n_ubatch, n_outputs_max); n_ubatch
                       // for a library context (n_outputs_max 0 = n_batch)
};
ContextShape context_shape(const ModelSpec& model, const EngineSpec& engine, int ctx_requested,
                           int n_parallel, bool unified, int n_ubatch, int n_batch, bool swa_full,
                           bool flash_attn = true);

// Bytes one tensor of `nrows` rows of `ne0` elements takes in a backend buffer: ggml_row_size
// plus CUDA's row-padding tail for quantized types, padded to the buffer alignment.
Figure tensor_bytes(const GgmlType& type, std::int64_t ne0, std::int64_t nrows, const BackendSpec& backend);

// What one layer keeps between tokens, as llama.cpp builds the memory for it
// (llama-model.cpp create_memory, llama-hparams.cpp n_embd_k_gqa/n_embd_v_gqa/n_embd_r/n_embd_s).
enum class LayerKind { full, sliding, recurrent, none };
struct LayerCache {
  LayerKind kind = LayerKind::full;
  std::int64_t k_width = 0;  // n_embd_k_gqa(il)
  std::int64_t v_width = 0;  // n_embd_v_gqa(il); 0 when the layer has no V (MLA V-less cache)
  std::int64_t idx_width = 0;  // the DSA lightning indexer's key row (one head of indexer key length, type_k), 0 without
  std::int64_t r_width = 0, s_width = 0;  // recurrent state per sequence, f32 elements
  int head_k = 0, head_v = 0;                // n_embd_head_k(il), n_embd_head_v(il); head_v 0 for MLA
  bool operator==(const LayerCache&) const = default;
};
std::vector<LayerCache> layer_caches(const ModelSpec& model, const EngineSpec& engine);

// How many layers of each kind a model has (for display: the same classification as layer_caches).
struct LayerCounts {
  int full = 0, sliding = 0, recurrent = 0, none = 0;
};
LayerCounts layer_counts(const ModelSpec& model);

struct KvCacheBytes {
  Figure k, v, swa_k, swa_v, state;
};
// Layers [layer_begin, layer_end) only (layer_end < 0: to the last): the cache of layers on one device.
KvCacheBytes kv_cache_bytes(const ModelSpec& model, const EngineSpec& engine, const ContextShape& shape,
                            const GgmlType& type_k, const GgmlType& type_v, bool flash_attn, const BackendSpec& backend,
                            int layer_begin = 0, int layer_end = -1);
// For each layer, one past the last layer of its run of identical consecutive layers (kv_cache_bytes sizes a run once).
std::vector<int> layer_run_ends(const std::vector<LayerCache>& layers);
// The same from the model's layer_caches(model, engine), when the caller keeps them (plan() asks per candidate and
// context), and with their layer_run_ends where it keeps those too (nullptr: the runs are found here).
KvCacheBytes kv_cache_bytes(const std::vector<LayerCache>& layers, const EngineSpec& engine, const ContextShape& shape,
                            const GgmlType& type_k, const GgmlType& type_v, bool flash_attn, const BackendSpec& backend,
                            int layer_begin = 0, int layer_end = -1, const std::vector<int>* run_ends = nullptr);

// The tensors of a GGUF produced by llama-quantize for `format` (catalog models), or the file's own.
std::vector<WeightTensor> weight_tensors(const ModelSpec& model, const WeightFormat& format, const EngineSpec& engine);

// Where llama.cpp puts each layer (src/llama-model.cpp load_tensors): at b10454 the output layer and
// repeating layers il >= n_layer + 1 - n_gpu_layers on the GPU (older builds: il >= n_layer - n_gpu_layers,
// the output layer only when n_gpu_layers > n_layer), the input layer always on the CPU; --cpu-moe / --n-cpu-moe N keep the expert tensors of the first N
// layers in RAM (common/arg.cpp: tensor-buffer overrides "blk\.N\.ffn_(up|down|gate)_exps").
struct Placement {
  int first_gpu_layer = 0;   // layers below this live on the CPU
  bool output_on_gpu = true;
  int cpu_moe_layers = 0;    // expert tensors of layers below this live on the CPU
  // Several GPUs (split mode layer): the normalised cumulative tensor split (llama-model.cpp load_tensors
  // "split points"); a GPU layer i_gpu-relative index j of act_gpu_layers goes to the first device whose
  // split point exceeds j / act_gpu_layers. Empty: one GPU.
  std::vector<double> split_points;
  int n_layer = 0;           // the model's layers (the output layer is index n_layer)
  // -ot PATTERN=DEVICE (common/arg.cpp --override-tensor, llama-model.cpp load_tensors): the first pattern
  // found in a weight tensor's name decides its device (-1: the CPU); KV stays with the layer.
  std::vector<std::pair<std::string, int>> overrides;
  static Placement full() { return {}; }
  int devices() const { return split_points.empty() ? 1 : static_cast<int>(split_points.size()); }
  // The device of layer il (il == n_layer: the output layer); -1 for the CPU.
  int device_of(int il) const {
    if (il < n_layer ? il < first_gpu_layer : !output_on_gpu) return -1;
    if (split_points.empty()) return 0;
    const int act = n_layer + 1 - first_gpu_layer;  // GPU layers counting the output layer
    const double x = static_cast<double>(il - first_gpu_layer) / act;
    for (size_t d = 0; d < split_points.size(); ++d)
      if (x < split_points[d]) return static_cast<int>(d);
    return static_cast<int>(split_points.size()) - 1;
  }
  // Set the split from per-device weights (a --tensor-split, or each device's free memory).
  void split(const std::vector<double>& weights);
  // output_counted: the build rule ngl_counts_output (-ngl counts the output layer first)
  static Placement for_request(const ModelSpec& model, std::optional<int> n_gpu_layers, std::optional<int> n_cpu_moe,
                               bool output_counted = true);
  bool on_gpu(int layer) const { return layer >= first_gpu_layer; }
  bool partial() const { return first_gpu_layer > 0 || !output_on_gpu; }
  // Some weights used in matmuls live in host RAM (layers, experts or overridden tensors).
  bool host_matmuls() const { return partial() || cpu_moe_layers > 0 || !overrides.empty(); }
};

// A matmul weight that lives in host RAM while a GPU runs the model: with op offload the GPU copies it into its
// compute buffer for the matmul's split (ggml-backend.cpp ggml_backend_sched_split_graph pass 5).
struct HostWeight {
  static constexpr int kEveryLayer = -1;
  int il = 0;         // its layer (kEveryLayer: the same weight in every repeating layer); the layer count: the output
  std::string base;   // its name within the layer: "attn_q", "ffn_up_exps", "output" (token_embd when tied)
  Bytes bytes = 0;    // its size in the GPU's buffer type (the copy keeps the tensor's layout)
  bool operator==(const HostWeight&) const = default;
};

struct WeightBytes {
  Figure device, host;              // device: every GPU together
  std::vector<Figure> per_device;   // each GPU's share (one entry with one GPU)
  Bytes largest_host_matrix = 0;  // the biggest host-resident matmul weight (copied into the GPU compute buffer)
  Bytes lookup_host = 0;          // token_embd in RAM: looked up a row per token, not streamed (the speed estimate)
  // Every host-resident matmul weight (empty for a model sized from its parameter count: largest_host_matrix then)
  // and a digest of the list, which keys the compute figures built with it.
  std::vector<HostWeight> host_weights;
  std::uint64_t host_weights_digest = 0;
};
// Labelled estimate for catalog models: per-tensor types follow llama-quantize's recipe, which a
// given GGUF may not (imatrix, custom mixes). Exact for a GGUF's own tensors.
WeightBytes weight_bytes(const ModelSpec& model, const WeightFormat& format, const EngineSpec& engine,
                         const BackendSpec& backend, const Placement& placement = Placement::full());

// Compute buffer on the GPU and on the host (closed-form estimates of ggml-alloc's peak).
struct ComputeBytes {
  Figure device, host;
  bool from_graph = false;  // the reserve-graph model sized it (else the closed forms)
};
// holds_output: the device with the output layer holds the logits block; other devices of a layer split do not.
// n_copies: the scheduler's copies of each split input under pipeline parallelism (1 without).
ComputeBytes compute_bytes(const ModelSpec& model, const EngineSpec& engine, const ContextShape& shape,
                           const GgmlType& type_k, const GgmlType& type_v, bool flash_attn, const BackendSpec& backend,
                           bool holds_output = true, int n_copies = 1);
// The same from the model's layer_caches(model, engine), when the caller keeps them.
// What a GPU reads from host RAM under op offload (weights or KV of layers left on the CPU), copying it into its
// compute buffer for the op that reads it (ggml-backend.cpp ggml_backend_sched_split_graph pass 5).
// Graphs with host matrices' copies kept between calls (memory/transformer_graph.hpp): the planner's, per plan.
class GraphReuse;
struct HostResident {
  const std::vector<HostWeight>* weights = nullptr;  // the host-resident matmul weights (nullptr: none)
  int kv_layers = 0;                                  // layers below this keep their KV cache in RAM
};
// host: with op offload, what the GPU copies from host RAM (default: every weight and the KV on the device).
// cut_hint (in and out): the period multiple whose cut held last time for this model (1 or 2), tried first; the
// figures do not depend on it.
ComputeBytes compute_bytes(const std::vector<LayerCache>& layers, const ModelSpec& model, const EngineSpec& engine,
                           const ContextShape& shape, const GgmlType& type_k, const GgmlType& type_v, bool flash_attn,
                           const BackendSpec& backend, bool holds_output = true, int n_copies = 1, const HostResident& host = {},
                           int* cut_hint = nullptr, GraphReuse* reuse = nullptr);

// What compute_bytes reads of a cache type: f32, f16, another unquantized type or quantized (the f16
// copies flash attention makes, the casts of an f32 cache, the rotation inputs), and the row size only where
// row_sizes says a graph holds rows of the cache type (compute_reads_row_sizes). Types with the same key give the
// same compute figures, so the ranker's memo shares them between K/V pairs (q8_0 and q4_0 caches on a GPU build one
// graph): tests/unit/memory_test.cpp checks every pair.
std::array<std::int64_t, 3> compute_type_key(const GgmlType& type, bool row_sizes);  // kind, block, bytes
// Whether compute_bytes reads the cache types' row sizes: only for rows of the cache in the graph, the K and V rows
// copied from RAM (op offload of layers whose KV is in RAM) and an MLA cache's transposed V copy without flash
// attention. A standard cache without flash attention is read in place (KQ's matmul reads the K view, the V view
// is stored transposed), so its quantized K types share one graph.
bool compute_reads_row_sizes(const ModelSpec& m, bool flash_attn, int host_kv_layers);

// Logits/embeddings output buffer (pinned host memory).
Figure output_bytes(const ModelSpec& model, const ContextShape& shape);

// Runtime overhead outside ggml's buffers: driver context, BLAS workspace, allocator pool slack.
Figure runtime_overhead(const GpuSpec* gpu, const BackendSpec& backend);

}  // namespace kvplan

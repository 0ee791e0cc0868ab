#pragma once
// The reserve graph of a standard transformer (attention, full or sliding-window, and a dense or
// mixture-of-experts FFN) as llama.cpp b10454 builds it (src/models/llama.cpp, qwen3.cpp, qwen3moe.cpp,
// gemma3.cpp, openai-moe-iswa.cpp over llama-graph.cpp build_attn / build_ffn / build_moe_ffn), tensor by
// tensor, for ggml_graph::peak_bytes. Which architectures follow it is data: `graph` in the engine's
// `archs` (projection order), checked node for node against graph dumps of tests/validation's models.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ggml_graph.hpp"
#include "kvplan/catalog.hpp"
#include "kvplan/memory.hpp"

namespace kvplan {

// nrot of a quantized K cache (src/llama-kv-cache.cpp constructor attn_rot_k): the largest power of two dividing
// the head size, at least 64. Applies when the model's K head size is a multiple of 64.
int kv_rotation_size(int head_size);

// Where the graph's inputs live (ggml-backend.cpp ggml_backend_sched_split_graph at b10454): in the one buffer of the
// CPU backend; or kept on the CPU backend ("1.inp") with a copy in the compute buffer of each GPU split that reads
// them (pass 5, "create a copy of the input in the split's backend": CUDA, ROCm, Vulkan, SYCL); or read in place
// from host memory by a device whose buffer types include the host's (Metal on unified memory).
enum class GraphInputs { in_buffer, copied, read_in_place };
// GGML_OP_OFFLOAD_MIN_BATCH default: the batch from which CUDA, ROCm, Vulkan, SYCL and Metal take an op whose weight
// lives in a host buffer (ggml-cuda.cu ggml_backend_cuda_device_offload_op, get_op_batch_size: ne[1] of a MUL_MAT,
// ne[2] of a MUL_MAT_ID; ggml-vulkan.cpp, ggml-metal.cpp the same).
constexpr int kOpOffloadMinBatch = 32;

struct GraphTarget {
  GraphInputs inputs = GraphInputs::in_buffer;
  // With op offload on a device that copies inputs: the host-resident matmul weights, each copied into the compute
  // buffer for its matmul, and the layers whose K and V views are copied for their attention.
  HostResident host;
  bool fa_f16_scratch = false;  // the FA node allocates f16 copies of non-f16 K/V (CUDA, ROCm)
  bool holds_output = true;     // the device runs the output layer (the logits block)
  // The model's layer caches (layer_caches with this engine) where the caller has them; else the builder works them out.
  const std::vector<LayerCache>* layers = nullptr;
};

// Where a graph built with host matrices holds their copies (op offload): each copy's tensor with the index of its
// weight in GraphTarget::host.weights, and the weights no matmul of the graph names (counted at the peak:
// Graph::add_unplaced). Another list of weights with the same layers and names gives the same graph but for these
// sizes (with_copies).
struct HostCopies {
  std::vector<std::pair<int, int>> tensors;  // (tensor id, weight index)
  std::vector<int> unplaced;                 // weight indices
};
// The graph `g`, built with `copies`, for `weights` instead: each copy's size set from its weight.
void with_copies(ggml_graph::Graph& g, const HostCopies& copies, const std::vector<HostWeight>& weights);

// Graphs with host matrices' copies, kept to be used again with other weights of the same layers and names
// (compute_bytes): the placement search asks the same graph, but for the copies' sizes, once per weight format
// (the planner runs it cache-type-major so that the formats' asks follow one another). The few most recent are kept.
class GraphReuse {
 public:
  // The graph of these arguments for `target`'s weights: one kept, its copies resized, or built (and kept).
  std::optional<ggml_graph::Graph> graph(const ModelSpec& m, const EngineSpec& engine, const ContextShape& s, const GgmlType& type_k,
                                         const GgmlType& type_v, bool flash_attn, const GraphTarget& target, int cut);

 private:
  struct Entry {
    std::array<const void*, 4> ptrs;    // model, engine, K and V types
    std::array<std::int64_t, 14> dims;  // the shape, flash attention, the target, the cut
    std::vector<std::pair<int, std::string>> names;  // the weights' layers and names, in order
    ggml_graph::Graph graph;
    HostCopies copies;
  };
  // the ranking sizes placements best bound first, so one setting's formats no longer follow one another: eight kept
  // (gemma-3-27b-it on the RTX 3060 built 42 graphs with four, 30 with eight or sixteen)
  static constexpr std::size_t kKept = 8;
  std::vector<Entry> entries_;  // oldest first
};

// nullopt when the architecture's graph is not modelled (legacy MLA, shared-KV layers, unknown recurrent kinds, ...).
// cut > 0: leave out whole periods of the longest run of alike layers (ggml_graph::Cut), each `cut` times the layers'
// period (2: for an allocator whose free blocks alternate between two layouts from layer to layer); the figures then
// come from ggml_graph::proven_peak_bytes, or from another cut or the whole graph (cut 0) where it cannot prove them.
std::optional<ggml_graph::Graph> reserve_graph(const ModelSpec& model, const EngineSpec& engine, const ContextShape& shape,
                                               const GgmlType& type_k, const GgmlType& type_v, bool flash_attn,
                                               const GraphTarget& target = {}, int cut = 0, HostCopies* copies = nullptr);

}  // namespace kvplan

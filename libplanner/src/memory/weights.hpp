#pragma once
// Internal to the planner: weight_bytes in two stages, so that a placement search sizes a format's tensors once and
// then only places them (a 94-layer MoE has ~1,100 tensors; the search tries a dozen placements per format).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvplan/plan.hpp"

#include "kvplan/memory.hpp"

namespace kvplan {

// A format's tensors with their bytes in the GPU backend's buffer and in the CPU's (the padding differs), a layer's
// tensors that are always placed together (the same layer; routed experts or not) summed into one part.
struct SizedWeights {
  struct Part {
    int il = -1;  // its repeating layer; -1 for token_embd, output and output_norm (one tensor per part)
    bool expert = false, on_host = false, token_embd = false, tied_copy = false;
    Bytes gpu = 0, gpu_raw = 0, cpu = 0, cpu_raw = 0;  // padded and unpadded, in each buffer
    Bytes largest_cpu_matrix = 0;  // the biggest matmul weight of the part, unpadded (op offload copies it)
    int first_matrix = 0, n_matrices = 0;  // its matmul weights in `matrices` (a repeated layer's are its first's)
  };
  // A matmul weight as the GPU's copy of it when it lives in RAM (op offload): its name within the layer
  // ("ffn_up", "output") and its bytes in the GPU backend's buffer. Kept only for a GPU backend. The name is a view:
  // a literal of the recipe or a part of the model's own tensor name (no SizedWeights outlives its model), not a
  // copy per tensor (a 64-layer model has ~450 matrices per format, and the ranker sizes every format).
  struct Matrix {
    std::string_view base;
    Bytes gpu_bytes = 0;
    int name = 0;  // which of the distinct names (the output layer's apart from the repeating layers'): an index
  };
  std::vector<Part> parts;
  std::vector<Matrix> matrices;
  int distinct_names = 0;  // of the matrices: placed_weights keeps one host weight per name, found by index
  std::vector<std::string> names;  // sized with names (-ot patterns match names): one tensor per part, its name
  bool exact = false;  // a GGUF's own tensors (else llama-quantize's recipe: an estimate)
};
// The tensors of a per-tensor model (a GGUF's, or the recipe's); not for models sized from their parameter count.
SizedWeights sized_weights(const ModelSpec& m, const WeightFormat& format, const EngineSpec& engine, const BackendSpec& backend,
                           bool names);
// The repeating layers' parts summed from the first layer on, for placed_weights' common case (one GPU, no -ot, the
// first layers or the first layers' routed experts in RAM), which a placement search asks at every probe: entry k of
// each list sums layers [0, k) (largest_cpu_matrix: the largest).
struct SizedLayers {
  struct Sums {
    Bytes gpu = 0, gpu_raw = 0, cpu = 0, cpu_raw = 0, largest_cpu_matrix = 0;
  };
  std::vector<Sums> all, routed_experts;  // every part of the layers; their routed experts' (empty: a dense model)
  std::vector<size_t> first_part;         // where layer k's parts begin; entry `layers`: where the output layer's begin
  // The layers' matmul weights as the GPU's copies of them in RAM (placed_weights' host_weights, a GPU backend's):
  // each name's first matrix, in the order the names first appear, with the layer it first appears in, and where each
  // name's largest grows from layer to layer (a few times: the layers repeat a handful of classes).
  struct Copies {
    std::vector<size_t> first;  // indices into SizedWeights::matrices
    std::vector<int> first_layer;
    std::vector<std::pair<int, Bytes>> growth;  // (k, the name's largest over layers [0, k)), by name, then k
    std::vector<size_t> growth_begin;           // each name's first entry in growth; names + 1 entries
    Bytes largest(int name, int layers_in_ram) const;  // the name's largest over layers [0, layers_in_ram)
  };
  Copies all_copies, expert_copies;  // of every part of the layers; of their routed experts'
};
// None where the parts are not the input layer's, the layers' in order, then the output layer's (a file may list them
// otherwise), or where a layer's part stays in RAM wherever its layer is (on_host).
std::optional<SizedLayers> sum_layers(const SizedWeights& w, int layers);
// What weight_bytes returns for these tensors under `placement`; `layers`: their sum_layers, where the caller keeps them.
WeightBytes placed_weights(const SizedWeights& sized, const ModelSpec& m, const EngineSpec& engine, const BackendSpec& backend,
                           const Placement& placement, const SizedLayers* layers = nullptr);
// Catalog MLA and recurrent models without a file: sized from params × bits per weight (weight_bytes_from_params).
bool sized_from_params(const ModelSpec& m);

}  // namespace kvplan

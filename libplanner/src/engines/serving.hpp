// Serving at scale with vLLM and SGLang (docs/engines.md "Serving at scale"): how a model is sharded over
// tensor-, pipeline-, data- and expert-parallel GPUs, what the paged KV pool holds, and what crossing nodes costs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/memory.hpp"

namespace kvplan::engines {

// Layers per pipeline stage as vLLM assigns them (vllm/distributed/utils.py get_pp_indices): layers / pp each,
// the remainder one apiece to the stages before the last, from the second-to-last backwards (the first and last
// stages hold the embeddings and the output head). SGLang's PP uses the same partition.
std::vector<int> pp_partition(int layers, int pp);

// One GPU's shard of the model: layers [first_layer, end_layer) of the stage, the embeddings on the first stage,
// the output head on the last, everything divided tensor-parallel ways; MoE experts divided `expert_shards`
// ways (tp, or tp x dp with expert parallelism).
struct Shard {
  int tp = 1, expert_shards = 1;
  int first_layer = 0, end_layer = -1;  // -1: every layer
  bool first = true, last = true;
};

// Weights of one GPU from the parameter count: linear layers at the format's bits (an experts_only format, MXFP4,
// quantizes the experts and keeps the other linear layers at head_bpw), head and embeddings at theirs; a tied head
// is a separate copy on the last stage when the stages differ.
WeightBytes shard_weight_bytes(const ModelSpec& model, const WeightFormat& format, double rel_error, const Shard& shard);

// What the paged pool holds, vLLM's way (vllm/v1/core/kv_cache_utils.py): num_blocks = pool bytes // bytes of a
// block over the layers; a request of len tokens takes cdiv(len, block) blocks; "Maximum concurrency for len
// tokens per request" = num_blocks / cdiv(len, block). SGLang is the same with blocks of one token
// (max_total_num_tokens = pool bytes // cell size).
struct PoolCapacity {
  std::int64_t tokens = 0;  // num_blocks · block
  double concurrency = 0;   // requests of len tokens the pool holds
};
PoolCapacity pool_capacity(double pool_bytes, double bytes_per_sequence, std::int64_t len, int block);

// Decode time per token spent on links between nodes: tensor parallelism across nodes all-reduces the hidden
// state twice a layer (attention and FFN outputs); pipeline stages on different nodes pass it on once each.
// Each crossing costs the link's small-message latency plus the bytes over its bandwidth (ring all-reduce moves
// 2 (tp - 1) / tp of the message).
double inter_node_seconds_per_token(const ModelSpec& model, const Interconnect& link, int tp, bool tp_spans_nodes,
                                    int stage_crossings);

}  // namespace kvplan::engines

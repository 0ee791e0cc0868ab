// Engines other than llama.cpp (vLLM, SGLang, ExLlamaV2/V3, MLX; Ollama runs llama.cpp's memory model):
// their memory rules, one function per allocation kind, and their launch lines. The rules are data in
// data/engines/<id>.yaml; docs/engines.md states each formula with its source.
#pragma once
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/memory.hpp"
#include "kvplan/plan.hpp"

namespace kvplan::engines {

// One sequence's cache in an engine: tokens held per layer kind, from its paging rules.
//   vLLM full: cdiv(len, block)·block; sliding: (cdiv(min(window − 1 + max_num_batched_tokens, len), block) + 1)·block
//     (vllm/v1/kv_cache_interface.py FullAttentionSpec / SlidingWindowSpec max_memory_usage_bytes)
//   SGLang: len (page 1; profile_max_num_token has no window term)
//   ExLlamaV2/V3: PAD(len, 256) (PAGED_PAGE_SIZE / PAGE_SIZE)
//   MLX: PAD(len, 256) (KVCache.step); sliding: min(PAD(len, 256), window) up to the window, then
//     min(len, window − 1 + prefill step) (RotatingKVCache concatenates a prefill chunk before trimming)
struct RuntimeTokens {
  std::int64_t full = 0, sliding = 0;
};
RuntimeTokens runtime_tokens(const RuntimeProfile& rt, const ModelSpec& model, int len, int activation_tokens);

// KV bytes for `sequences` conversations of `len` tokens: per layer width · tokens · bytes per element
// (K and V separately; an MLA layer caches its 576-wide latent once, no V); recurrent layers keep
// their conv state in the model dtype and the SSM state in f32 per sequence.
// With tensor parallelism (tp > 1) the bytes of one GPU: each holds max(1, n_kv_heads / tp) KV heads
// (vllm/config/model.py get_num_kv_heads); an MLA latent is replicated on every GPU.
KvCacheBytes runtime_kv_bytes(const RuntimeProfile& rt, const ModelSpec& model, const EngineSpec& arch_rules,
                              const RuntimeCacheType& type_k, const RuntimeCacheType& type_v, int len, int sequences,
                              int activation_tokens, int tp = 1, int first_layer = 0, int end_layer = -1);

// Weights from the parameter count: linear layers at the format's bits per weight, the output head
// and the token embeddings at theirs (embeddings in RAM where the engine keeps them there).
// With tensor parallelism, one GPU's share: linear layers, embeddings and head are all split tp ways
// (vocab-parallel embeddings); the norms (well under 0.1 %) are ignored. The whole model's shard
// (engines/serving.hpp shard_weight_bytes, which also sizes pipeline stages).
WeightBytes runtime_weight_bytes(const ModelSpec& model, const WeightFormat& format, double rel_error, int tp = 1);

// The batch an engine's profile run sizes its activations for (vLLM: max_num_batched_tokens tokens, logits
// for min(max_num_seqs, tokens) rows on the last stage; gpu_model_runner.py profile_run).
struct ActivationBatch {
  int tokens = 0;
  int logit_rows = 1;
  int tp = 1;
  bool expert_parallel = false;  // vLLM --enable-expert-parallel: each GPU holds whole experts
};

// The activation peak of a forward pass over the batch in bf16 (the FFN's gate and up rows, or vLLM's fused
// MoE workspace; the query rows and four n_embd rows) and of the sampler over its logits (rt.sampler_bytes_per_logit
// per row and vocabulary entry): an estimate.
Figure runtime_activation_bytes(const RuntimeProfile& rt, const ModelSpec& model, const ActivationBatch& batch);

// The lines an engine is started with, by name ("vllm", "ollama-env", "modelfile", "tabby-config", …).
// `requested`: the name --model gave (a catalog model named by its Ollama tag is pulled by that tag).
std::vector<Launch> runtime_launches(const Catalog& catalog, const RuntimeProfile& rt, const ModelSpec& model, const Option& option,
                                     const Resolved& resolved, const std::string& requested = {});

}  // namespace kvplan::engines

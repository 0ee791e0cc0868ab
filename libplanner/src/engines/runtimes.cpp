#include "engines/runtimes.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engines/checkpoints.hpp"
#include "engines/llama_cpp.hpp"
#include "engines/serving.hpp"

namespace kvplan::engines {
namespace {
std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }
std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
Bytes bytes_of(double x) { return checked_bytes(x, "engine memory"); }
void add(Figure& sum, double bytes) {
  sum.bytes += bytes_of(bytes);
  sum.unpadded += bytes_of(bytes);
  sum.high += bytes_of(bytes);
}
}  // namespace

RuntimeTokens runtime_tokens(const RuntimeProfile& rt, const ModelSpec& m, int len, int activation_tokens) {
  const std::int64_t g = rt.token_granularity;
  RuntimeTokens t;
  t.full = round_up(len, g);
  const std::int64_t window = m.swa ? m.swa->window : 0;
  if (window <= 0 || rt.sliding == "full") {
    t.sliding = t.full;
  } else if (rt.sliding == "window_plus_batch") {
    t.sliding = (cdiv(std::min<std::int64_t>(window - 1 + activation_tokens, len), g) + 1) * g;
  } else {  // rotating
    // RotatingKVCache(max_size = window): up to the window it grows in 256-token steps; past it, a prefill
    // chunk is concatenated to the last window − 1 tokens before trimming, so the peak is window − 1 +
    // the prefill step (measured with the mlx CPU build, tests/validation/mlx_cache.py).
    t.sliding = len <= window ? std::min<std::int64_t>(t.full, window)
                              : std::min<std::int64_t>(len, window - 1 + std::max(1, activation_tokens));
  }
  return t;
}

namespace {
// Bytes per element of DeepSeek-V3.2's lightning-indexer key cache. vLLM and SGLang run DeepSeek's FP8 indexer kernels,
// which keep the keys as float8 with one float32 scale per 128 elements whatever the KV cache dtype
// (deepseek-ai/DeepSeek-V3.2-Exp @6d8cb70d inference/model.py Indexer: k_cache float8_e4m3fn [.., index_head_dim],
// k_scale_cache float32 [.., index_head_dim // 128]): 132 B per layer and token at index_head_dim 128, as SGLang's
// 'KV size: 18.68 GB' over 256000 tokens shows (tests/validation/serving_logs/sglang-ktransformers1969-deepseek-v32.yaml:
// 8,078 B per token above the MLA latent's 70,272 over 61 layers). Other engines: the K cache's type (not measured).
double indexer_key_bytes(const RuntimeProfile& rt, const RuntimeCacheType& tk) {
  if (rt.kind == "vllm" || rt.kind == "sglang") return 1.0 + 4.0 / 128;
  return tk.k_bytes;
}
}  // namespace

KvCacheBytes runtime_kv_bytes(const RuntimeProfile& rt, const ModelSpec& m, const EngineSpec& arch_rules, const RuntimeCacheType& tk,
                              const RuntimeCacheType& tv, int len, int sequences, int activation_tokens, int tp, int first_layer,
                              int end_layer) {
  const RuntimeTokens tokens = runtime_tokens(rt, m, len, activation_tokens);
  const double seqs = std::max(1, sequences);
  const auto layers = layer_caches(m, arch_rules);
  KvCacheBytes out;
  const size_t end = end_layer < 0 ? layers.size() : std::min(layers.size(), static_cast<size_t>(end_layer));
  for (size_t il = static_cast<size_t>(std::max(0, first_layer)); il < end; ++il) {
    const LayerCache& c = layers[il];
    switch (c.kind) {
      case LayerKind::full:
      case LayerKind::sliding: {
        const bool swa = c.kind == LayerKind::sliding;
        const int heads = m.kv_heads_at(static_cast<int>(il));
        const double share = m.mla || tp <= 1 || heads <= 0 ? 1.0 : static_cast<double>(std::max(1, heads / tp)) / heads;
        const double n = static_cast<double>(swa ? tokens.sliding : tokens.full) * seqs * share;
        add(swa ? out.swa_k : out.k, static_cast<double>(c.k_width) * n * tk.k_bytes);
        if (c.v_width > 0) add(swa ? out.swa_v : out.v, static_cast<double>(c.v_width) * n * tv.v_bytes);
        if (c.idx_width > 0) add(out.k, static_cast<double>(c.idx_width) * n * indexer_key_bytes(rt, tk));
        break;
      }
      case LayerKind::recurrent:  // conv state in the model dtype, SSM state in f32 (an estimate per engine)
        add(out.state, (static_cast<double>(c.r_width) * 2 + static_cast<double>(c.s_width) * 4) * seqs);
        break;
      case LayerKind::none:
        break;
    }
  }
  out.state.accuracy = Accuracy::estimate;
  return out;
}

WeightBytes runtime_weight_bytes(const ModelSpec& m, const WeightFormat& f, double rel_error, int tp) {
  Shard whole;
  whole.tp = whole.expert_shards = tp;
  return shard_weight_bytes(m, f, rel_error, whole);
}

namespace {
// vLLM's fused MoE layer (vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts_impl): for a chunk of
// M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) tokens it allocates cache13 = M·topk·max(N, K) elements (the
// gate/up output, then reused for the down output) and intermediate_cache2 = M·topk·N/2 (after the activation),
// N = w13's rows = 2·moe_intermediate_size per TP rank (whole with expert parallelism), K = hidden size.
double fused_moe_elements(const ModelSpec& m, const ActivationBatch& b, int chunk) {
  const double rows = std::min(b.tokens, chunk);
  const double n = 2.0 * m.moe->expert_ff / (b.expert_parallel ? 1 : b.tp);
  return rows * m.moe->experts_used * (std::max(n, static_cast<double>(m.embd)) + n / 2);
}
}  // namespace

Figure runtime_activation_bytes(const RuntimeProfile& rt, const ModelSpec& m, const ActivationBatch& b) {
  const double tokens = b.tokens;
  const double q_width = m.mla ? static_cast<double>(m.heads) * (m.mla->kv_lora_rank + m.mla->rope_dim)
                               : static_cast<double>(m.heads) * m.head_dim_k;
  const bool fused_moe = m.moe && rt.moe_chunk_tokens > 0;
  // The FFN's elements: gate and up rows of the widest FFN; with vLLM's fused MoE, the wider of a dense layer's
  // rows and an MoE layer's workspace plus its shared expert's rows.
  const double dense_ff = !fused_moe ? static_cast<double>(m.widest_ffn()) : m.moe_layer_count() < m.layers ? m.ff : 0;
  double ffn = tokens * 2 * dense_ff / b.tp;
  if (fused_moe) ffn = std::max(ffn, fused_moe_elements(m, b, rt.moe_chunk_tokens) + tokens * 2.0 * m.moe->shared_ff / b.tp);
  const double forward = (ffn + tokens * (2 * q_width / b.tp + 4.0 * m.embd)) * 2;
  const double sampler = static_cast<double>(std::max(0, b.logit_rows)) * m.vocab * rt.sampler_bytes_per_logit;
  // vLLM samples after the forward pass (gpu_model_runner.py profile_run, then _dummy_sampler_run): the forward's
  // temporaries are free by then, its output hidden states are not. Other engines: both at once.
  const double typical = rt.kind == "vllm" ? std::max(forward, tokens * m.embd * 2 + sampler) : forward + sampler;
  return Figure::estimate(bytes_of(typical), bytes_of(typical * 1.5));
}

namespace {
std::string checkpoint(const ModelSpec& m, const WeightFormat& f, const std::string& kind) {
  if (kind == "mlx") return fmt::format("mlx-community/{}-{}", m.name, f.id);
  if (kind == "exllamav2" || kind == "exllamav3") return fmt::format("{}-{}-{}", m.name, kind == "exllamav2" ? "exl2" : "exl3", f.id);
  if (f.id == "bf16" && !m.hf_id.empty()) return m.hf_id;
  return fmt::format("{}-{}", m.name, f.id == "bf16" ? "BF16" : f.id == "fp8" ? "FP8" : f.id == "awq" ? "AWQ" : "GPTQ-Int4");
}

// The parallel layout's flags, as each engine spells them.
std::string parallel_flags(const std::string& kind, const Resolved& r) {
  std::string out;
  const bool vllm = kind == "vllm";
  auto put = [&](const char* vllm_flag, const char* sglang_flag, int v) { out += fmt::format(" {} {}", vllm ? vllm_flag : sglang_flag, v); };
  if (r.tensor_parallel > 1) put("--tensor-parallel-size", "--tp", r.tensor_parallel);
  if (r.pipeline_stages > 1) put("--pipeline-parallel-size", "--pp-size", r.pipeline_stages);
  if (r.data_parallel > 1) put("--data-parallel-size", "--dp-size", r.data_parallel);
  if (r.expert_parallel) out += vllm ? std::string(" --enable-expert-parallel") : fmt::format(" --ep-size {}", r.tensor_parallel);
  return out;
}

// vLLM and SGLang: the serve line with the checkpoint, the admitted sequences and the layout; across nodes,
// vLLM's Ray cluster (docs.vllm.ai "Parallelism and scaling": ray start on each node, vllm serve on the head with
// the Ray executor) or one SGLang launch per node (--nnodes, --node-rank, --dist-init-addr).
std::vector<Launch> serving_launches(const Catalog& catalog, const RuntimeProfile& rt, const ModelSpec& m, const Option& o,
                                     const Resolved& r, const WeightFormat* f) {
  const CheckpointChoice ck = f ? checkpoint_for(catalog, m, *f) : CheckpointChoice{};
  const std::string model = !ck.repo.empty() ? ck.repo : fmt::format("<a {} checkpoint of {}>", f ? f->id : "", m.name);
  const std::string quant = ck.quantize_online && f && !f->flag.empty() ? " " + f->flag : "";
  const bool vllm = rt.kind == "vllm";
  std::string line = vllm ? fmt::format("vllm serve {} --max-model-len {} --max-num-seqs {} --kv-cache-dtype {} --gpu-memory-utilization {:g}",
                                        model, o.ctx_per_slot, r.max_num_seqs, o.cache_type_k, r.memory_fraction)
                          : fmt::format("python -m sglang.launch_server --model-path {} --context-length {}{} --kv-cache-dtype {} "
                                        "--mem-fraction-static {:g}",
                                        model, o.ctx_per_slot,
                                        r.max_num_seqs > 0 ? fmt::format(" --max-running-requests {}", r.max_num_seqs) : "",
                                        o.cache_type_k, r.memory_fraction);
  line += parallel_flags(rt.kind, r) + quant;
  if (r.max_batched_tokens_asked) line += fmt::format(" {} {}", vllm ? "--max-num-batched-tokens" : "--chunked-prefill-size", r.max_batched_tokens);
  std::vector<Launch> out;
  if (r.nodes <= 1) {
    out.push_back({rt.kind, line});
  } else if (vllm) {
    out.push_back({"vllm", line + " --distributed-executor-backend ray" + (r.data_parallel > 1 ? " --data-parallel-backend ray" : "")});
    out.push_back({"ray-head", "ray start --head --port=6379"});
    out.push_back({"ray-worker", fmt::format("ray start --address=<head-node-ip>:6379  # on each of the other {} nodes, before vllm serve", r.nodes - 1)});
  } else {
    for (int n = 0; n < r.nodes; ++n)
      out.push_back({n == 0 ? "sglang" : fmt::format("sglang-node{}", n),
                     line + fmt::format(" --nnodes {} --node-rank {} --dist-init-addr <node0-ip>:5000", r.nodes, n)});
  }
  return out;
}
}  // namespace

namespace {
// The Modelfile's FROM lines: a remote model as Ollama pulls it itself (hf.co/repo:quant, the registry tag); an Ollama
// tag that names the planned weights, as typed; anything else as the GGUF file beside the Modelfile. A bare tag
// (qwen2.5-coder:32b) pulls the weights Ollama chose for it, which kvplan does not know offline, so it names the file
// planned and says why in a comment.
std::string modelfile_from(const Catalog& catalog, const ModelSpec& m, const std::string& requested, const std::string& weights) {
  if (m.remote && !m.remote->ollama_from.empty()) return "FROM " + m.remote->ollama_from;
  const std::string file = "FROM ./" + gguf_file_name(m, weights);
  if (m.remote || !m.file_paths.empty() || requested.find(':') == std::string::npos) return file;
  if (const WeightFormat* f = catalog.ollama_tag_weights(requested); f && f->id == weights) return "FROM " + requested;  // that file
  return fmt::format("# {} pulls the weights Ollama chose for that tag (not known offline); this plan is for {}: import that\n"
                     "# file, or plan the tag's own with its quantization in the name (e.g. {}-<quant>) or --weights\n{}",
                     requested, weights, requested, file);
}
}  // namespace

std::vector<Launch> runtime_launches(const Catalog& catalog, const RuntimeProfile& rt, const ModelSpec& m, const Option& o,
                                     const Resolved& r, const std::string& requested) {
  std::vector<Launch> out;
  const int seqs = r.n_parallel;
  if (rt.kind == "ollama") {
    // Ollama passes -c num_ctx×OLLAMA_NUM_PARALLEL -np OLLAMA_NUM_PARALLEL and one type for K and V
    // (llm/llama_server.go); the context length is also pinned so the automatic one does not apply.
    out.push_back({"ollama-env", fmt::format("OLLAMA_FLASH_ATTENTION={} OLLAMA_KV_CACHE_TYPE={} OLLAMA_NUM_PARALLEL={} "
                                             "OLLAMA_CONTEXT_LENGTH={} ollama serve",
                                             o.flash_attn ? 1 : 0, o.cache_type_k, seqs, o.ctx_per_slot)});
    std::string modelfile = fmt::format("{}\nPARAMETER num_ctx {}", modelfile_from(catalog, m, requested, o.weights), o.ctx_per_slot);
    if (r.n_gpu_layers && *r.n_gpu_layers >= 0 && *r.n_gpu_layers <= m.layers) modelfile += fmt::format("\nPARAMETER num_gpu {}", *r.n_gpu_layers);
    out.push_back({"modelfile", modelfile});
    return out;
  }
  const WeightFormat* f = nullptr;
  for (const auto& w : rt.weight_formats)
    if (w.id == o.weights) f = &w;
  const std::string model = f ? checkpoint(m, *f, rt.kind) : m.name;
  const std::string quant = f && !f->flag.empty() ? " " + f->flag : "";
  if (rt.kind == "vllm" || rt.kind == "sglang") {
    return serving_launches(catalog, rt, m, o, r, f);
  } else if (rt.kind == "exllamav2" || rt.kind == "exllamav3") {
    // TabbyAPI config.yml (config_sample.yml keys under model:); cache_size holds every job together.
    const std::string mode = rt.kind == "exllamav2" || o.cache_type_k == "FP16" ? o.cache_type_k
                                                                                 : fmt::format("\"{},{}\"", o.cache_type_k, o.cache_type_v);
    out.push_back({"tabby-config", fmt::format("model:\n  model_name: {}\n  max_seq_len: {}\n  cache_size: {}\n  cache_mode: {}\n"
                                               "  chunk_size: 2048\n  max_batch_size: {}",
                                               model, o.ctx_per_slot, static_cast<long long>(o.ctx_per_slot) * seqs, mode, seqs)});
  } else if (rt.kind == "mlx") {
    // mlx_lm.generate takes the KV flags (its --quantized-kv-start defaults to 5000: 0 quantizes from the start);
    // mlx_lm.server has none, so it is emitted only for an unquantized cache.
    const RuntimeCacheType* t = rt.cache_type(o.cache_type_k);
    const bool quantized = t && t->quantized();
    out.push_back({"mlx-generate", fmt::format("mlx_lm.generate --model {}{} --prompt -", model,
                                               quantized ? fmt::format(" --kv-bits {} --kv-group-size 64 --quantized-kv-start 0",
                                                                       o.cache_type_k)
                                                         : "")});
    if (!quantized) out.push_back({"mlx-server", fmt::format("mlx_lm.server --model {}", model)});
  }
  return out;
}

}  // namespace kvplan::engines

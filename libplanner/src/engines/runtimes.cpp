#include "engines/runtimes.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engines/llama_cpp.hpp"

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

KvCacheBytes runtime_kv_bytes(const RuntimeProfile& rt, const ModelSpec& m, const EngineSpec& arch_rules, const RuntimeCacheType& tk,
                              const RuntimeCacheType& tv, int len, int sequences, int activation_tokens, int tp) {
  const RuntimeTokens tokens = runtime_tokens(rt, m, len, activation_tokens);
  const double seqs = std::max(1, sequences);
  const auto layers = layer_caches(m, arch_rules);
  KvCacheBytes out;
  for (size_t il = 0; il < layers.size(); ++il) {
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
  const double embed = static_cast<double>(m.vocab) * m.embd;
  // A separate output head unless tied; an engine that keeps embeddings in RAM still needs the head on the GPU.
  const double head = (!m.tied_embeddings || f.embed_on_host) ? embed : 0;
  const double linear = std::max(0.0, static_cast<double>(m.params) - embed - (m.tied_embeddings ? 0 : embed));
  const double device = (linear * f.bpw / 8 + head * f.head_bpw / 8 + (f.embed_on_host ? 0 : embed * f.embed_bpw / 8)) / tp;
  const double host = f.embed_on_host ? embed * f.embed_bpw / 8 : 0;
  WeightBytes w;
  w.device = Figure::estimate(bytes_of(device), bytes_of(device * (1 + rel_error)));
  w.host = Figure::estimate(bytes_of(host), bytes_of(host * (1 + rel_error)));
  w.lookup_host = bytes_of(host);  // the host part is the token embeddings alone
  return w;
}

Figure runtime_activation_bytes(const ModelSpec& m, int tokens, int sequences, int tp) {
  const double ff = static_cast<double>(m.widest_ffn());
  const double q_width = m.mla ? static_cast<double>(m.heads) * (m.mla->kv_lora_rank + m.mla->rope_dim)
                               : static_cast<double>(m.heads) * m.head_dim_k;
  const double rows = static_cast<double>(tokens) * ((2 * ff + 2 * q_width) / tp + 4.0 * m.embd) * 2;
  const double logits = static_cast<double>(std::max(1, sequences)) * m.vocab * 4 * 2;
  const double typical = rows + logits;
  return Figure::estimate(bytes_of(typical), bytes_of(typical * 1.5));
}

namespace {
std::string checkpoint(const ModelSpec& m, const WeightFormat& f, const std::string& kind) {
  if (kind == "mlx") return fmt::format("mlx-community/{}-{}", m.name, f.id);
  if (kind == "exllamav2" || kind == "exllamav3") return fmt::format("{}-{}-{}", m.name, kind == "exllamav2" ? "exl2" : "exl3", f.id);
  if (f.id == "bf16" && !m.hf_id.empty()) return m.hf_id;
  return fmt::format("{}-{}", m.name, f.id == "bf16" ? "BF16" : f.id == "fp8" ? "FP8" : f.id == "awq" ? "AWQ" : "GPTQ-Int4");
}
}  // namespace

std::vector<Launch> runtime_launches(const RuntimeProfile& rt, const ModelSpec& m, const Option& o, const Resolved& r) {
  std::vector<Launch> out;
  const int seqs = r.n_parallel;
  if (rt.kind == "ollama") {
    // Ollama passes -c num_ctx×OLLAMA_NUM_PARALLEL -np OLLAMA_NUM_PARALLEL and one type for K and V
    // (llm/llama_server.go); the context length is also pinned so the automatic one does not apply.
    out.push_back({"ollama-env", fmt::format("OLLAMA_FLASH_ATTENTION={} OLLAMA_KV_CACHE_TYPE={} OLLAMA_NUM_PARALLEL={} "
                                             "OLLAMA_CONTEXT_LENGTH={} ollama serve",
                                             o.flash_attn ? 1 : 0, o.cache_type_k, seqs, o.ctx_per_slot)});
    const bool tagged = m.remote && !m.remote->ollama_from.empty();  // Ollama pulls it by name itself
    std::string modelfile = fmt::format("FROM {}\nPARAMETER num_ctx {}", tagged ? m.remote->ollama_from : "./" + gguf_file_name(m, o.weights),
                                        o.ctx_per_slot);
    if (r.n_gpu_layers && *r.n_gpu_layers >= 0 && *r.n_gpu_layers <= m.layers) modelfile += fmt::format("\nPARAMETER num_gpu {}", *r.n_gpu_layers);
    out.push_back({"modelfile", modelfile});
    return out;
  }
  const WeightFormat* f = nullptr;
  for (const auto& w : rt.weight_formats)
    if (w.id == o.weights) f = &w;
  const std::string model = f ? checkpoint(m, *f, rt.kind) : m.name;
  const std::string quant = f && !f->flag.empty() ? " " + f->flag : "";
  if (rt.kind == "vllm") {
    const std::string tp = r.tensor_parallel > 1 ? fmt::format(" --tensor-parallel-size {}", r.tensor_parallel) : "";
    out.push_back({"vllm", fmt::format("vllm serve {} --max-model-len {} --max-num-seqs {} --kv-cache-dtype {} "
                                       "--gpu-memory-utilization {:g}{}{}",
                                       model, o.ctx_per_slot, seqs, o.cache_type_k, r.memory_fraction, tp, quant)});
  } else if (rt.kind == "sglang") {
    out.push_back({"sglang", fmt::format("python -m sglang.launch_server --model-path {} --context-length {} --max-running-requests {} "
                                         "--kv-cache-dtype {} --mem-fraction-static {:g}{}{}",
                                         model, o.ctx_per_slot, seqs, o.cache_type_k, r.memory_fraction,
                                         r.tensor_parallel > 1 ? fmt::format(" --tp {}", r.tensor_parallel) : "", quant)});
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

#include <algorithm>

#include "kvplan/memory.hpp"

namespace kvplan {

// src/llama-context.cpp llama_context::llama_context:
//   n_ctx = GGML_PAD(n_ctx, 256) (builds before PR #17046: 256 with flash attention, 32 without —
//   the build rule ctx_pad_256 in data/engines/llama.cpp.yaml); unified: n_ctx_seq = n_ctx;
//   else n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256), n_ctx = n_ctx_seq * n_seq_max
//   n_batch = min(n_ctx as requested, n_batch) (causal); n_ubatch = min(n_batch, n_ubatch)
// src/llama-kv-cache-iswa.cpp llama_kv_cache_iswa::llama_kv_cache_iswa:
//   size_swa = GGML_PAD(min(size_base, n_swa * (unified ? n_seq_max : 1) + n_ubatch), 256); --swa-full: size_base
ContextShape context_shape(const ModelSpec& model, const EngineSpec& engine, int ctx_requested, int n_parallel,
                           bool unified, int n_ubatch, int n_batch, bool swa_full, bool flash_attn) {
  ContextShape s;
  const int pad = engine.rule_holds("ctx_pad_256") || flash_attn ? engine.ctx_pad : engine.ctx_pad_legacy_no_fa;
  const int n_seq = std::max(1, n_parallel);
  s.n_seq = n_seq;
  s.unified = unified;
  s.n_ctx = static_cast<int>(pad_to(ctx_requested, pad));
  if (unified) {
    s.n_ctx_seq = s.n_ctx;
    s.n_stream = 1;
  } else {
    s.n_ctx_seq = static_cast<int>(pad_to(s.n_ctx / n_seq, pad));
    s.n_ctx = s.n_ctx_seq * n_seq;
    s.n_stream = n_seq;
  }
  // n_batch is clamped by the context as requested, before padding (llama-context.cpp).
  s.n_batch = std::min(std::max(1, ctx_requested), n_batch);
  s.n_ubatch = std::min(s.n_batch, n_ubatch);
  s.n_outputs = s.n_ubatch;  // llama_context: n_outputs_max 0 means n_batch; the caller narrows it (llama-server)
  if (model.swa) {
    const long long want = static_cast<long long>(model.swa->window) * (unified ? n_seq : 1) + s.n_ubatch;
    s.swa_cells = swa_full ? s.n_ctx_seq : static_cast<int>(pad_to(std::min<long long>(s.n_ctx_seq, want), pad));
  }
  return s;
}

}  // namespace kvplan

#include <algorithm>
#include <stdexcept>

#include "kvplan/checked.hpp"
#include "kvplan/error.hpp"
#include "kvplan/memory.hpp"

namespace kvplan {

LayerCounts layer_counts(const ModelSpec& m) {
  LayerCounts n;
  for (int il = 0; il < m.layers; ++il) {
    if (m.is_recurrent(il)) ++n.recurrent;
    else if ((m.shared_kv_from > 0 && il >= m.shared_kv_from) || m.kv_heads_at(il) == 0) ++n.none;
    else if (m.is_sliding(il) && !m.mla) ++n.sliding;
    else ++n.full;
  }
  return n;
}

// ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alloc_size: a quantized tensor
// whose ne0 is not a multiple of MATRIX_ROW_PADDING gets ggml_row_size(type, pad - ne0 % pad) once.
// ggml/src/ggml-alloc.c ggml_backend_alloc_ctx_tensors_from_buft_impl: each tensor padded to the
// buffer alignment.
Figure tensor_bytes(const GgmlType& type, std::int64_t ne0, std::int64_t nrows, const BackendSpec& backend) {
  if (ne0 < 0 || nrows < 0) size_overflow("tensor shape");
  const Bytes raw = checked_mul(type.row_size(ne0), nrows, "tensor bytes (row size x rows)");
  Bytes alloc = raw;
  const int pad = backend.matrix_row_padding;
  if (pad > 0 && type.quantized() && ne0 % pad != 0) alloc = checked_add(alloc, type.row_size(pad - ne0 % pad), "tensor bytes");
  return Figure::exact(pad_to(alloc, backend.alignment), raw);
}

namespace {
void add(Figure& sum, const Figure& f) {
  sum.bytes = checked_add(sum.bytes, f.bytes, "KV cache bytes");
  sum.unpadded = checked_add(sum.unpadded, f.unpadded, "KV cache bytes");
  sum.high = checked_add(sum.high, f.high, "KV cache bytes");
}
}  // namespace

// Per layer, what llama.cpp allocates (src/llama-hparams.cpp, src/llama-model.cpp create_memory):
//   attention: n_embd_k_gqa(il) = n_embd_head_k(il) · n_head_kv(il), likewise V; sliding layers may
//     have their own head size (n_embd_head_k_swa, build rule per_layer_head_size);
//   MLA (deepseek2 with key_length_mla): one 576-wide latent "head" (kv_lora_rank + rope), and no V
//     tensor since PR #19067 (build rule mla_v_less); a legacy GGUF caches plain MHA K and V;
//   DSA (deepseek32, src/llama-kv-cache-dsa.cpp llama_kv_cache_dsa): beside the MLA cache a second llama_kv_cache of
//     the same cells, streams and type_k for the lightning indexer's keys: hparams with one KV head of
//     n_embd_head_k_full = indexer_head_size, and no V (is_mla() still holds). Summed into K, as the engine's
//     memory_breakdown sums the two caches;
//   recurrent (llama-memory-recurrent.cpp): n_embd_r = (d_conv-1)·(d_inner + 2·n_group·d_state)
//     (Mamba/Mamba2/GDN), token_shift_count·n_embd (RWKV), n_embd·(L_cache-1) (LFM2);
//     n_embd_s = d_state·d_inner (Mamba/GDN), n_embd·head_size (RWKV), 0 (LFM2);
//   none: 0 KV heads (FFN-only) or a layer that reuses another's cache (Gemma 3n);
//   parallel hybrids (Falcon-H1): every layer is an attention layer that also holds the recurrent state.
namespace {
void set_state_widths(const ModelSpec& m, LayerCache& c) {
  const Recurrent& r = *m.recurrent;
  if (r.kind == "rwkv6" || r.kind == "rwkv7") {
    c.r_width = checked_mul(r.token_shift_count, m.embd, "token_shift_count x embedding_length");
    c.s_width = checked_mul(m.embd, r.head_size, "embedding_length x wkv.head_size");
  } else if (r.kind == "lfm2") {
    c.r_width = checked_mul(m.embd, r.l_cache - 1, "embedding_length x shortconv.l_cache");
  } else {  // mamba, mamba2, gdn
    const std::int64_t groups = checked_mul(checked_mul(2, r.n_group, "ssm.group_count"), r.d_state, "ssm.group_count x ssm.state_size");
    c.r_width = checked_mul(r.d_conv - 1, checked_add(r.d_inner, groups, "ssm.inner_size"), "ssm.conv_kernel x ssm.inner_size");
    c.s_width = checked_mul(r.d_state, r.d_inner, "ssm.state_size x ssm.inner_size");
  }
}
}  // namespace

std::vector<LayerCache> layer_caches(const ModelSpec& m, const EngineSpec& engine) {
  std::vector<LayerCache> out(static_cast<size_t>(m.layers));
  const bool per_layer_heads = engine.rule_holds("per_layer_head_size");
  for (int il = 0; il < m.layers; ++il) {
    LayerCache& c = out[static_cast<size_t>(il)];
    if (m.is_recurrent(il)) {
      c.kind = LayerKind::recurrent;
      set_state_widths(m, c);
      continue;
    }
    if ((m.shared_kv_from > 0 && il >= m.shared_kv_from) || m.kv_heads_at(il) == 0) {
      c.kind = LayerKind::none;
      continue;
    }
    if (m.mla && !m.mla->legacy) {
      c.kind = LayerKind::full;
      c.k_width = checked_add(m.mla->kv_lora_rank, m.mla->rope_dim, "attention.kv_lora_rank + rope.dimension_count");
      c.head_k = static_cast<int>(c.k_width);
      c.v_width = engine.rule_holds("mla_v_less") ? 0 : m.mla->kv_lora_rank;
      c.idx_width = m.mla->indexer_key_length;
      continue;
    }
    const bool sliding = m.is_sliding(il);
    c.kind = sliding ? LayerKind::sliding : LayerKind::full;
    const int hk = sliding && per_layer_heads && m.head_dim_k_swa ? m.head_dim_k_swa : m.head_dim_k;
    const int hv = sliding && per_layer_heads && m.head_dim_v_swa ? m.head_dim_v_swa : m.head_dim_v;
    c.k_width = checked_mul(hk, m.kv_heads_at(il), "attention.key_length x attention.head_count_kv");
    c.v_width = checked_mul(hv, m.kv_heads_at(il), "attention.value_length x attention.head_count_kv");
    c.head_k = hk;
    c.head_v = hv;
    if (m.recurrent && m.recurrent->parallel) set_state_widths(m, c);
  }
  return out;
}

// src/llama-kv-cache.cpp llama_kv_cache::llama_kv_cache: per layer with KV,
//   K = new_tensor_3d(type_k, n_embd_k_gqa(il), kv_size, n_stream)
//   V = new_tensor_3d(type_v, v_trans ? n_embd_v_gqa_max() : n_embd_v_gqa(il), kv_size, n_stream), v_trans = !flash_attn
// Sliding-window layers live in the iSWA cache with shape.swa_cells cells per stream.
// src/llama-memory-recurrent.cpp: r and s tensors of f32 per layer with max(1, n_seq_max) cells.
KvCacheBytes kv_cache_bytes(const ModelSpec& m, const EngineSpec& engine, const ContextShape& shape, const GgmlType& type_k,
                            const GgmlType& type_v, bool flash_attn, const BackendSpec& backend, int layer_begin, int layer_end) {
  return kv_cache_bytes(layer_caches(m, engine), engine, shape, type_k, type_v, flash_attn, backend, layer_begin, layer_end);
}

namespace {
bool same_cache(const LayerCache& a, const LayerCache& b) {
  return a.kind == b.kind && a.k_width == b.k_width && a.v_width == b.v_width && a.idx_width == b.idx_width && a.r_width == b.r_width &&
         a.s_width == b.s_width;
}
// n identical layers' figure: the sum of n equal terms (the same overflow check as adding them one by one).
Figure times(const Figure& f, std::int64_t n) {
  return {checked_mul(f.bytes, n, "KV cache bytes"), checked_mul(f.unpadded, n, "KV cache bytes"), checked_mul(f.high, n, "KV cache bytes")};
}
}  // namespace

std::vector<int> layer_run_ends(const std::vector<LayerCache>& layers) {
  std::vector<int> ends(layers.size());
  for (size_t i = layers.size(); i-- > 0;)
    ends[i] = i + 1 < layers.size() && same_cache(layers[i], layers[i + 1]) ? ends[i + 1] : static_cast<int>(i) + 1;
  return ends;
}

KvCacheBytes kv_cache_bytes(const std::vector<LayerCache>& layers, const EngineSpec& engine, const ContextShape& shape,
                            const GgmlType& type_k, const GgmlType& type_v, bool flash_attn, const BackendSpec& backend,
                            int layer_begin, int layer_end, const std::vector<int>* run_ends) {
  if (run_ends && run_ends->size() != layers.size()) throw std::logic_error("kv_cache_bytes: run ends of other layers");
  const int n_layer = static_cast<int>(layers.size());
  const int end = layer_end < 0 ? n_layer : std::min(layer_end, n_layer);
  KvCacheBytes out;
  if (std::max(0, layer_begin) >= end) return out;  // no layer on this device (the context search asks often)
  std::int64_t v_max = 0;  // n_embd_v_gqa_max(): the widest V over all layers (read without flash attention only)
  if (!flash_attn)
    for (const auto& c : layers) v_max = std::max(v_max, c.v_width);
  const std::int64_t mem_size = std::max(1, shape.n_seq);
  // Runs of identical consecutive layers are sized once (a transformer's layers mostly are).
  for (int il = std::max(0, layer_begin), run = 1; il < end; il += run) {
    const LayerCache& c = layers[static_cast<size_t>(il)];
    if (run_ends) {
      run = std::min((*run_ends)[static_cast<size_t>(il)], end) - il;
    } else {
      run = 1;
      while (il + run < end && same_cache(layers[static_cast<size_t>(il + run)], c)) ++run;
    }
    switch (c.kind) {
      case LayerKind::full:
      case LayerKind::sliding: {
        const bool swa = c.kind == LayerKind::sliding;
        const std::int64_t rows = checked_mul(swa ? shape.swa_cells : shape.n_ctx_seq, shape.n_stream, "KV cells x streams");
        add(swa ? out.swa_k : out.k, times(tensor_bytes(type_k, c.k_width, rows, backend), run));
        if (c.idx_width > 0) add(out.k, times(tensor_bytes(type_k, c.idx_width, rows, backend), run));
        if (c.v_width > 0) add(swa ? out.swa_v : out.v, times(tensor_bytes(type_v, flash_attn ? c.v_width : v_max, rows, backend), run));
        [[fallthrough]];  // a parallel hybrid's attention layer also holds the recurrent state (r_width 0 otherwise)
      }
      case LayerKind::recurrent:
        if (c.r_width > 0) add(out.state, times(tensor_bytes(engine.type("f32", "state"), checked_mul(c.r_width, mem_size, "recurrent state x sequences"), 1, backend), run));
        if (c.s_width > 0) add(out.state, times(tensor_bytes(engine.type("f32", "state"), checked_mul(c.s_width, mem_size, "recurrent state x sequences"), 1, backend), run));
        break;
      case LayerKind::none:
        break;
    }
  }
  return out;
}

}  // namespace kvplan

#include <algorithm>

#include "kvplan/memory.hpp"

namespace kvplan {

// ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alloc_size: a quantized tensor
// whose ne0 is not a multiple of MATRIX_ROW_PADDING gets ggml_row_size(type, pad - ne0 % pad) once.
// ggml/src/ggml-alloc.c ggml_backend_alloc_ctx_tensors_from_buft_impl: each tensor padded to the
// buffer alignment.
Figure tensor_bytes(const GgmlType& type, std::int64_t ne0, std::int64_t nrows, const BackendSpec& backend) {
  const Bytes raw = type.row_size(ne0) * nrows;
  Bytes alloc = raw;
  const int pad = backend.matrix_row_padding;
  if (pad > 0 && type.quantized() && ne0 % pad != 0) alloc += type.row_size(pad - ne0 % pad);
  return Figure::exact(pad_to(alloc, backend.alignment), raw);
}

namespace {
void add(Figure& sum, const Figure& f) {
  sum.bytes += f.bytes;
  sum.unpadded += f.unpadded;
  sum.high += f.high;
}
}  // namespace

// src/llama-kv-cache.cpp llama_kv_cache::llama_kv_cache: per layer with KV,
//   K = new_tensor_3d(type_k, n_embd_k_gqa(il), kv_size, n_stream)
//   V = new_tensor_3d(type_v, v_trans ? n_embd_v_gqa_max() : n_embd_v_gqa(il), kv_size, n_stream), v_trans = !flash_attn
// Sliding-window layers live in the iSWA cache with shape.swa_cells cells per stream.
KvCacheBytes kv_cache_bytes(const ModelSpec& model, const ContextShape& shape, const GgmlType& type_k, const GgmlType& type_v,
                            bool flash_attn, const BackendSpec& backend) {
  KvCacheBytes out;
  const std::int64_t k_width = static_cast<std::int64_t>(model.kv_heads) * model.head_dim_k;
  const std::int64_t v_width = static_cast<std::int64_t>(model.kv_heads) * model.head_dim_v;
  // Without flash attention V is stored transposed and padded to the widest layer
  // (n_embd_v_gqa_max); catalog models have one width for every layer, so the padding is nil.
  const std::int64_t v_width_alloc = v_width;
  (void)flash_attn;
  for (int il = 0; il < model.layers; ++il) {
    const bool swa = model.is_sliding(il);
    const std::int64_t rows = static_cast<std::int64_t>(swa ? shape.swa_cells : shape.n_ctx_seq) * shape.n_stream;
    add(swa ? out.swa_k : out.k, tensor_bytes(type_k, k_width, rows, backend));
    add(swa ? out.swa_v : out.v, tensor_bytes(type_v, v_width_alloc, rows, backend));
  }
  return out;
}

}  // namespace kvplan

// The catalog image (catalog/image.hpp): every catalog type's fields, listed once, written and read by one
// pair of archives. A field left out of a list is caught at build time: kvplan_catalog_image decodes what it
// encoded and compares it with the loaded catalog (the types' defaulted operator==).
#include "catalog/image.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvplan::detail {
namespace {

#define KVPLAN_IMAGE_FIELDS(Type, ...)                                   \
  template <class A> void fields(A& a, const Type& x) { a(__VA_ARGS__); } \
  template <class A> void fields(A& a, Type& x) { a(__VA_ARGS__); }

KVPLAN_IMAGE_FIELDS(RopeScaling, x.type, x.factor, x.orig_ctx)
KVPLAN_IMAGE_FIELDS(SlidingWindow, x.window, x.pattern, x.chunked)
KVPLAN_IMAGE_FIELDS(Mla, x.kv_lora_rank, x.rope_dim, x.nope_dim, x.v_head_dim, x.q_lora_rank, x.legacy, x.indexer_heads,
                    x.indexer_key_length, x.indexer_top_k)
KVPLAN_IMAGE_FIELDS(Recurrent, x.kind, x.d_conv, x.d_inner, x.d_state, x.n_group, x.dt_rank, x.head_size, x.token_shift_count,
                    x.l_cache, x.attention_every, x.attention_offset, x.attention_layers, x.ffn_only_layers, x.parallel)
KVPLAN_IMAGE_FIELDS(WeightTensor, x.name, x.type, x.ne0, x.nrows, x.on_host)
KVPLAN_IMAGE_FIELDS(Moe, x.experts, x.experts_used, x.expert_ff, x.shared_ff, x.dense_lead, x.layer_step)
KVPLAN_IMAGE_FIELDS(ModelSpec::Remote, x.kind, x.id, x.llama_flag, x.llama_value, x.ollama_from)
KVPLAN_IMAGE_FIELDS(ModelSpec, x.id, x.name, x.hf_id, x.arch, x.family, x.source, x.note, x.license, x.license_source, x.aliases, x.params, x.layers, x.embd,
                    x.heads, x.kv_heads, x.head_dim_k, x.head_dim_v, x.ff, x.vocab, x.tied_embeddings, x.qkv_bias, x.qk_norm,
                    x.post_norms, x.attn_sinks, x.rope, x.ctx_native, x.ctx_extended, x.rope_scaling, x.swa, x.moe, x.mla,
                    x.recurrent, x.kv_heads_per_layer, x.sliding_layers, x.head_dim_k_swa, x.head_dim_v_swa, x.shared_kv_from,
                    x.ff_per_layer, x.k_eq_v, x.per_layer_embd, x.mtp_layers, x.native_expert_type, x.file_tensors, x.file_format, x.file_quant_label, x.file_paths,
                    x.fields_used, x.fields_assumed, x.remote)
KVPLAN_IMAGE_FIELDS(GpuSpec, x.id, x.name, x.vendor, x.backend, x.memory_kind, x.total_source, x.compute_capability, x.arch,
                    x.source, x.aliases, x.total_mib, x.working_set_mib, x.bandwidth_gbs, x.fp16_tflops)
KVPLAN_IMAGE_FIELDS(GgmlType, x.name, x.id, x.block, x.bytes)
KVPLAN_IMAGE_FIELDS(Estimate, x.typical_mib, x.high_mib)
KVPLAN_IMAGE_FIELDS(BackendSpec, x.id, x.name, x.alignment, x.matrix_row_padding, x.verified, x.fa_types_default,
                    x.fa_types_all_quants, x.fa_mixed_default, x.fa_mixed_slow, x.fa_mixed_all_quants, x.fa_head_sizes,
                    x.fa_head_pairs, x.context, x.pool, x.blas_workspace_mib, x.blas_workspace_mib_hopper, x.compute_rel_error,
                    x.source)
KVPLAN_IMAGE_FIELDS(BuildRule, x.rule, x.value, x.source, x.from_build, x.until_build)
KVPLAN_IMAGE_FIELDS(EngineSpec::ArchRule, x.swa_pattern, x.chunked, x.window_fixed, x.mla, x.recurrent, x.attention,
                    x.attention_interval, x.gated_query, x.graph, x.moe_gating, x.shared_expert_gate, x.outputs_after_norm,
                    x.rope_switch_key, x.residual_scale, x.nextn_skipped, x.tied_output_copy, x.kv_from_start,
                    x.per_layer_input, x.altup, x.mtp_skipped, x.dsa_indexer, x.family)
KVPLAN_IMAGE_FIELDS(EngineSpec::ServerFlag, x.names, x.values, x.kept, x.reason)
KVPLAN_IMAGE_FIELDS(EngineSpec, x.id, x.name, x.build_name, x.build_source, x.vendored_by, x.build, x.ggml_types, x.archs,
                    x.unmodelled_archs, x.cache_types, x.cache_types_offered, x.quant_fallback, x.ctx_pad,
                    x.ctx_pad_legacy_no_fa, x.default_ubatch, x.default_batch, x.backends, x.build_rules, x.margin_mib,
                    x.margin_source, x.server_flags, x.weights_rel_error, x.weights_rel_error_fallback)
KVPLAN_IMAGE_FIELDS(TensorTypeRule, x.tensors, x.type, x.layers, x.first_n, x.min_gqa, x.experts, x.min_experts, x.n_layer)
KVPLAN_IMAGE_FIELDS(WeightFormat, x.id, x.base_type, x.source, x.quality_source, x.ftype, x.rules, x.rel_loss,
                    x.rel_loss_estimate, x.bpw_llama31_8b, x.size_gib_llama31_8b, x.offered, x.native_only, x.bpw,
                    x.head_bpw, x.embed_bpw, x.embed_on_host, x.quality_as, x.flag, x.experts_only)
KVPLAN_IMAGE_FIELDS(RuntimeCacheType, x.id, x.k_bytes, x.v_bytes, x.prior_k, x.prior_v, x.offered, x.source)
KVPLAN_IMAGE_FIELDS(MiBRange, x.typical, x.high)
KVPLAN_IMAGE_FIELDS(RuntimeProfile, x.id, x.name, x.kind, x.version, x.source, x.aliases, x.backends, x.rules, x.same_type_kv,
                    x.mix_unquantized, x.unified_kv, x.token_granularity, x.sliding, x.quantized_sliding, x.temp_fp16_layer,
                    x.memory_fraction, x.fraction_covers_activations, x.memory_fraction_source, x.activation_tokens,
                    x.activation_tokens_large, x.activation_source, x.sampler_bytes_per_logit, x.moe_chunk_tokens,
                    x.sampler_source, x.context, x.graphs, x.overhead_source, x.margin_mib,
                    x.margin_source, x.cache_types, x.weight_formats)
KVPLAN_IMAGE_FIELDS(StrictnessBand, x.upto, x.factor)
KVPLAN_IMAGE_FIELDS(TaskProfile, x.id, x.name, x.metric, x.summary, x.source, x.aliases, x.ctx_target, x.ctx_min,
                    x.decode_floor_tps, x.ttft_max_s, x.speed_source, x.strictness)
KVPLAN_IMAGE_FIELDS(TypeSensitivity, x.type, x.engine, x.bits, x.k_bits, x.v_bits, x.rotation, x.codebook, x.group, x.planned,
                    x.defective)
KVPLAN_IMAGE_FIELDS(FamilyFactor, x.family, x.k_low_bits_rot, x.k_low_bits_norot, x.all_bits, x.k_low_bits_max, x.k_codebooks,
                    x.source)
KVPLAN_IMAGE_FIELDS(AnalogRow, x.id, x.family, x.k_type, x.v_type, x.rot_k, x.params_b, x.ctx, x.loss, x.predicted, x.upper)
KVPLAN_IMAGE_FIELDS(Evidence, x.id, x.text, x.source)
KVPLAN_IMAGE_FIELDS(MeasuredEvidence, x.id, x.k_type, x.v_type, x.rotation, x.family, x.kind, x.text, x.source, x.params_b)
KVPLAN_IMAGE_FIELDS(ModelCalibration, x.model, x.k_factor, x.v_factor, x.interval_low, x.interval_high, x.rows, x.evidence)
KVPLAN_IMAGE_FIELDS(PriorParams, x.model_version, x.bits_ref, x.size_ref_b, x.size_clamp_high, x.low_bits, x.alpha_k_max,
                    x.weight_bpw_high, x.weight_bpw_mid, x.w_high, x.w_mid, x.w_low, x.weight_loss_ref_b, x.band_free,
                    x.band_mild, x.band_noticeable, x.a_k, x.a_v, x.beta_k, x.beta_v, x.r_norot, x.beta_norot,
                    x.size_exponent_k, x.size_exponent_v, x.size_exponent_norot, x.size_knee_b, x.ctx_floor, x.alpha_k,
                    x.alpha_k_size, x.alpha_v, x.interval_low, x.interval_high, x.types, x.families, x.measured, x.analogs,
                    x.evidence, x.calibrations, x.source)
KVPLAN_IMAGE_FIELDS(Benchmark, x.id, x.name, x.metric, x.source, x.tasks, x.scale_low, x.scale_high, x.higher_is_better,
                    x.pool_variants)
KVPLAN_IMAGE_FIELDS(BenchmarkScore, x.model, x.benchmark, x.variant, x.mode, x.source, x.date, x.note, x.value, x.file)
KVPLAN_IMAGE_FIELDS(LicenseSpec, x.id, x.name, x.hub, x.source, x.osi)
KVPLAN_IMAGE_FIELDS(Checkpoint, x.id, x.model, x.weights, x.repo, x.source, x.native)
KVPLAN_IMAGE_FIELDS(Interconnect, x.id, x.name, x.source, x.gbs, x.allreduce_latency_us)
KVPLAN_IMAGE_FIELDS(Catalog, x.models, x.gpus, x.engines, x.weight_formats, x.tasks, x.runtimes, x.prior, x.benchmarks,
                    x.scores, x.licenses, x.checkpoints, x.interconnects)
#undef KVPLAN_IMAGE_FIELDS

template <class T> struct is_vector : std::false_type {};
template <class T> struct is_vector<std::vector<T>> : std::true_type {};
template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
template <class T> struct is_map : std::false_type {};
template <class K, class V> struct is_map<std::map<K, V>> : std::true_type {};
template <class T> struct is_pair : std::false_type {};
template <class A, class B> struct is_pair<std::pair<A, B>> : std::true_type {};

// Native byte order: the image is made and read by builds for the same machine.
class Writer {
 public:
  template <class... T> void operator()(const T&... v) { (put(v), ...); }
  std::string bytes;

 private:
  void raw(const void* p, std::size_t n) { bytes.append(static_cast<const char*>(p), n); }
  void count(std::size_t n) {
    const auto n32 = static_cast<std::uint32_t>(n);
    raw(&n32, sizeof n32);
  }
  template <class T> void put(const T& v) {
    if constexpr (std::is_arithmetic_v<T>) {
      raw(&v, sizeof v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      count(v.size());
      raw(v.data(), v.size());
    } else if constexpr (is_vector<T>::value || is_map<T>::value) {
      count(v.size());
      for (const auto& x : v) put(x);
    } else if constexpr (is_optional<T>::value) {
      put(v.has_value());
      if (v) put(*v);
    } else if constexpr (is_pair<T>::value) {
      put(v.first), put(v.second);
    } else {
      fields(*this, v);
    }
  }
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class... T> void operator()(T&... v) { (get(v), ...); }
  bool at_end() const { return in_.empty(); }

 private:
  const char* take(std::size_t n) {
    if (n > in_.size()) throw std::logic_error("the built-in catalog image is truncated (a stale build?)");
    const char* p = in_.data();
    in_.remove_prefix(n);
    return p;
  }
  std::size_t count() {
    std::uint32_t n = 0;
    std::memcpy(&n, take(sizeof n), sizeof n);
    return n;
  }
  template <class T> void get(T& v) {
    if constexpr (std::is_arithmetic_v<T>) {
      std::memcpy(&v, take(sizeof v), sizeof v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      const std::size_t n = count();
      v.assign(take(n), n);
    } else if constexpr (is_vector<T>::value) {
      v.resize(count());
      for (auto& x : v) get(x);
    } else if constexpr (is_map<T>::value) {
      for (std::size_t i = 0, n = count(); i < n; ++i) {
        typename T::key_type key;  // not a default-constructed std::pair: clang finds EngineSpec::ArchRule's trait false
        typename T::mapped_type value;
        get(key), get(value);
        v.emplace_hint(v.end(), std::move(key), std::move(value));
      }
    } else if constexpr (is_optional<T>::value) {
      bool present = false;
      get(present);
      if (present) get(v.emplace());
    } else if constexpr (is_pair<T>::value) {
      get(v.first), get(v.second);
    } else {
      fields(*this, v);
    }
  }
  std::string_view in_;
};

constexpr std::string_view kMagic = "kvplan-catalog-image";

}  // namespace

std::string encode_catalog_image(const Catalog& catalog, std::string_view source_hash) {
  Writer w;
  w(std::string(kMagic), kCatalogImageVersion, std::string(source_hash), catalog);
  return std::move(w.bytes);
}

Catalog decode_catalog_image(std::string_view image, std::string_view source_hash) {
  Reader r(image);
  std::string magic, hash;
  unsigned version = 0;
  r(magic, version, hash);
  if (magic != kMagic || version != kCatalogImageVersion || hash != source_hash)
    throw std::logic_error("the built-in catalog image does not match this build's data/ (a stale build: rebuild kvplan)");
  Catalog c;
  r(c);
  if (!r.at_end()) throw std::logic_error("the built-in catalog image has trailing bytes (a stale build?)");
  c.prior.index_types();
  return c;
}

}  // namespace kvplan::detail

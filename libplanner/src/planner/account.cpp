// account(): every allocation of one candidate at one context, placed in its pool, and the pools summed;
// largest_fitting_ctx(): the inverse, the longest context at which a candidate fits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "engines/serving.hpp"
#include "memory/transformer_graph.hpp"
#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

// A pool's totals and headroom from the sums of its allocations.
PoolUsage pool_usage(const Pool& pool, PoolUsage u) {
  u.total = checked_add(u.allocations, pool.overhead.bytes, "pool total");
  u.total_high = checked_add(u.allocations_high, pool.overhead.high, "pool total");
  u.headroom = pool.bounded() ? pool.capacity - pool.reserve - pool.margin - u.total_high : 0;
  return u;
}

void sum_pools(const Setup& s, Option& o) {
  for (const auto& pool : s.pools) {
    PoolUsage u;
    u.pool = pool.id;
    for (const auto& a : o.allocations)
      if (a.pool == pool.id)
        u.allocations = checked_add(u.allocations, a.figure.bytes, a.what),
        u.allocations_high = checked_add(u.allocations_high, a.figure.high, a.what);
    o.pools.push_back(pool_usage(pool, u));
  }
}


// One GPU of a (pipeline stage of a) model in an engine that sizes its own memory.
Option account_shard(const Setup& s, const Candidate& c, int ctx, const engines::Shard& shard) {
  const ModelSpec& m = *s.model;
  const RuntimeProfile& rt = *s.runtime;
  const Request& r = s.request;
  const bool serving = rt.kind == "vllm" || rt.kind == "sglang";
  const RuntimeCacheType& tk = *rt.cache_type(c.k);
  const RuntimeCacheType& tv = *rt.cache_type(c.v);
  const int seqs = serving ? std::max(1, s.resolved.concurrency) : std::max(1, r.n_parallel);
  const int tp = shard.tp;
  const KvCacheBytes kv = engines::runtime_kv_bytes(rt, m, *s.engine, tk, tv, ctx, seqs, s.activation_tokens, tp, shard.first_layer, shard.end_layer);
  const WeightBytes w = engines::shard_weight_bytes(m, *c.weights, s.engine->weights_rel_error_fallback, shard);
  Option o;
  o.weights = c.weights->id;
  o.ctx_size = ctx;
  o.ctx_per_slot = ctx;
  o.cache_type_k = c.k;
  o.cache_type_v = c.v;
  o.flash_attn = true;
  o.beyond_native = ctx > m.ctx_native;
  o.below_task_min = ctx < s.min_ctx;
  auto put = [&](const std::string& what, const std::string& pool, const Figure& f) {
    if (f.bytes != 0 || what == "k_cache") o.allocations.push_back({"main", what, pool, f});
  };
  put("weights", s.device_pool, w.device);
  put("weights_host", s.host_pool, w.host);
  put("k_cache", s.device_pool, kv.k);
  put("v_cache", s.device_pool, kv.v);
  put("swa_k_cache", s.device_pool, kv.swa_k);
  put("swa_v_cache", s.device_pool, kv.swa_v);
  put("state", s.device_pool, kv.state);
  if (rt.temp_fp16_layer && (tk.quantized() || tv.quantized())) {
    // exllamav2/cache.py footprint(): fp16 K and V of one layer per device for the quantized cache.
    std::int64_t widest = 0;
    for (const auto& lc : s.layers_of(m)) widest = std::max(widest, lc.k_width + lc.v_width);
    const Bytes temp = checked_mul(checked_mul(widest, engines::runtime_tokens(rt, m, ctx, 0).full, "cache_temp"), seqs * 2LL, "cache_temp");
    put("cache_temp", s.device_pool, Figure::exact(temp, temp));
  }
  // vLLM profiles a batch of max_num_batched_tokens tokens, and samples logits for max_num_seqs rows (on the
  // last stage only): gpu_model_runner.py profile_run / _dummy_sampler_run.
  const int logit_rows = !shard.last ? 0 : serving && s.resolved.max_num_seqs > 0 ? std::min(s.resolved.max_num_seqs, std::max(1, s.activation_tokens)) : seqs;
  if (rt.fraction_covers_activations && s.activation_tokens > 0)
    put("compute", s.device_pool,
        engines::runtime_activation_bytes(rt, m, {s.activation_tokens, logit_rows, tp, serving && s.resolved.expert_parallel}));
  if (rt.graphs.high > 0)
    put("cuda_graphs", s.device_pool, Figure::estimate(static_cast<Bytes>(rt.graphs.typical * kMiB), static_cast<Bytes>(rt.graphs.high * kMiB)));
  sum_pools(s, o);
  // What the pool holds: the KV the plan counts plus what is left of the device at the typical figures, in the
  // engine's blocks (vLLM's "GPU KV cache size" and "Maximum concurrency" lines; SGLang's max_total_num_tokens).
  const Bytes kv_all = kv.k.bytes + kv.v.bytes + kv.swa_k.bytes + kv.swa_v.bytes + kv.state.bytes;
  const Pool& pool = s.pools.front();
  const PoolUsage& use = o.pools.front();
  const double left = pool.bounded() ? static_cast<double>(pool.capacity - pool.reserve - pool.margin - use.total) : 0;
  if (kv_all > 0 && use.headroom >= 0 && !serving) {  // other pooled engines: the headroom at the upper bounds
    o.max_concurrency = static_cast<double>(kv_all + use.headroom) / (static_cast<double>(kv_all) / seqs);
  } else if (kv_all > 0 && use.headroom >= 0) {
    const engines::PoolCapacity cap = engines::pool_capacity(static_cast<double>(kv_all) + left, static_cast<double>(kv_all) / seqs, ctx,
                                                             rt.token_granularity);
    o.max_concurrency = cap.concurrency;
    if (serving) o.kv_pool_tokens = cap.tokens;
  }
  return o;
}

// An engine that sizes its own memory (data/engines/<id>.yaml, engines/runtimes.hpp): weights from the
// parameter count, KV by the engine's paging for the conversations the pool must hold (vLLM/SGLang: --concurrency,
// default 1, the engine's own start-up check; others: --parallel), its temporaries and activations, CUDA graphs.
// With pipeline parallelism each stage is accounted on its own and the tightest one is the option's pool
// (vLLM sizes every worker's pool to the smallest: kv_cache_utils.py get_kv_cache_configs). ctx is per conversation.
Option account_runtime(const Setup& s, const Candidate& c, int ctx) {
  const bool serving = s.runtime->kind == "vllm" || s.runtime->kind == "sglang";
  const std::vector<int> parts = engines::pp_partition(s.model->layers, s.resolved.pipeline_stages);
  Option best;
  int first = 0;
  for (size_t st = 0; st < parts.size(); ++st) {
    engines::Shard shard;
    shard.tp = s.resolved.tensor_parallel;
    shard.expert_shards = s.resolved.expert_parallel ? shard.tp * s.resolved.data_parallel : shard.tp;
    shard.first_layer = first;
    shard.end_layer = first + parts[st];
    shard.first = st == 0;
    shard.last = st + 1 == parts.size();
    first = shard.end_layer;
    Option o = account_shard(s, c, ctx, shard);
    if (serving) {
      Option::Stage stage{shard.first_layer, shard.end_layer, shard.first, shard.last, o.sum("weights"), o.kv_total(),
                          o.pools.front().total_high, o.pools.front().headroom};
      const bool tighter = st == 0 || o.max_concurrency < best.max_concurrency ||
                           (o.max_concurrency == best.max_concurrency && o.pools.front().headroom < best.pools.front().headroom);
      std::vector<Option::Stage> stages = best.stages;
      if (tighter) best = o;
      best.stages = stages;
      if (parts.size() > 1) best.stages.push_back(stage);
    } else {
      best = o;
    }
  }
  return best;
}

// The draft model's own context (component "draft"): the main context's n_ctx, slots, batch and flash
// attention with its cache types; its reserve graph computes logits for n_parallel rows
// (common_base_params_to_speculative: n_outputs_max = n_parallel); its weights by -ngld.
template <class Record>
void add_draft(const Setup& s, const Candidate& c, int ctx, Record& record) {
  const Setup::Draft& d = *s.draft;
  const ModelSpec& dm = *d.model;
  const EngineSpec& e = *s.engine;
  const Request& r = s.request;
  const GgmlType& tk = e.type(d.type_k, "--cache-type-k-draft");
  const GgmlType& tv = e.type(d.type_v, "--cache-type-v-draft");
  ContextShape shape = context_shape(dm, e, ctx, r.n_parallel, r.kv_unified, s.resolved.n_ubatch, s.resolved.n_batch, r.swa_full,
                                     c.flash_attn);
  shape.n_outputs = std::min(shape.n_ubatch, std::max(1, r.n_parallel));
  const BackendSpec& cpu = s.cpu();
  const KvCacheBytes kv = s.kv(dm, shape, tk, tv, c.flash_attn, *s.backend, d.placement.first_gpu_layer);
  const KvCacheBytes kv_host = s.kv(dm, shape, tk, tv, c.flash_attn, cpu, 0, d.placement.first_gpu_layer);
  const ComputeBytes compute = s.compute(dm, shape, tk, tv, c.flash_attn, *s.backend);
  if (!s.draft_weights) s.draft_weights = weight_bytes(dm, d.format(), e, *s.backend, d.placement);  // the same for every probe
  const WeightBytes& w = *s.draft_weights;
  auto put = [&](const char* what, const std::string& pool, const Figure& f) {
    if (f.bytes != 0) record("draft", what, pool, f);
  };
  put("weights", s.device_pool, w.device);
  put("weights_host", s.host_pool, w.host);
  auto put_kv = [&](const KvCacheBytes& k, const std::string& pool) { put_kv_parts(k, pool, put); };
  put_kv(kv, s.device_pool);
  put_kv(kv_host, s.host_pool);
  put("compute", s.device_pool, compute.device);
  put("compute_host", s.host_pool, compute.host);
  put("output", s.host_pool, output_bytes(dm, shape));
}

// The vision projector (component "mmproj", tools/mtmd/clip.cpp): its tensors on the GPU unless
// --no-mmproj-offload, and the compute buffer of the encoder's warm-up graph, estimated for one image of
// the configured size: n_patches rows through the FFN and beside attention, plus the f32 KQ without flash
// attention (n_patches² · heads).
template <class Record>
void add_projector(const Setup& s, const Candidate& c, Record& record) {
  const ProjectorSpec& p = *s.request.mmproj;
  const EngineSpec& e = *s.engine;
  const BackendSpec& backend = s.request.mmproj_offload ? *s.backend : e.backend("cpu");
  const std::string& pool = s.request.mmproj_offload ? s.device_pool : s.host_pool;
  Figure weights;
  for (const auto& t : p.tensors) {
    const Figure f = tensor_bytes(e.type(t.type, "--mmproj"), t.ne0, t.nrows, backend);
    weights.bytes += f.bytes;
    weights.unpadded += f.unpadded;
  }
  weights.high = weights.bytes;
  record("mmproj", "weights", pool, weights);
  const double n = p.n_patches() + 1.0;
  const double bytes = n * (2.0 * p.ff + 6.0 * p.embd) * 4 + (c.flash_attn ? 0 : n * n * p.heads * 4);
  if (bytes > 0)
    record("mmproj", "compute", pool, Figure::estimate(checked_bytes(bytes, "--mmproj compute"), checked_bytes(bytes * 1.5, "--mmproj compute")));
}



// The context's shape for the main model: llama-server's slots, batches and logits rows.
ContextShape main_shape(const Setup& s, const Candidate& c, int ctx) {
  const Request& r = s.request;
  ContextShape sh = context_shape(*s.model, *s.engine, ctx, r.n_parallel, r.kv_unified, s.resolved.n_ubatch, s.resolved.n_batch,
                                  r.swa_full, c.flash_attn);
  sh.n_outputs = std::min(sh.n_ubatch, s.resolved.n_outputs_max);
  return sh;
}

// ggml-backend.cpp GGML_SCHED_MAX_COPIES: the copies of each split input the scheduler keeps under pipeline parallelism.
constexpr int kSchedMaxCopies = 4;

int sched_copies(const Setup& s) { return s.resolved.pipeline_parallel ? kSchedMaxCopies : 1; }

// The compute buffers with host-resident weights.
// Reserve-graph model, at n_ubatch >= 32 on a GPU (op offload): ggml_backend_sched_backend_id_from_cur gives a matmul
// whose weight is in a host buffer to the GPU ("1.off"), and pass 2 ("expand gpu down/up") puts every op without a
// weight there too, so the GPU buffer is the full-offload graph's and the host buffer holds the graph inputs only.
// A device that cannot read host memory copies each such weight into its buffer for the matmul's split (pass 5),
// freed after it: the graph places each copy beside its matmul (transformer_graph.cpp Builder::matmul), so a copy
// raises the peak only where it outgrows the rest of the graph (the Llama-3-8B -ngl 16 log: 1705 MiB, the attention
// peak, no 411 MiB output-matrix copy on top). Metal reads host weights in place (compute.cpp graph_target).
// Otherwise (the closed forms, a CPU backend, or a batch below 32) the largest copy adds to the GPU's peak and the
// CPU layers need a CPU compute buffer of their own.
ComputeBytes placed_compute(const Setup& s, const Candidate& c, const ContextShape& shape, const GgmlType& tk, const GgmlType& tv) {
  const Placement& place = c.placement;
  const ModelSpec& m = *s.model;
  if (!place.host_matmuls()) return s.compute(m, shape, tk, tv, c.flash_attn, *s.backend, true, sched_copies(s));
  const bool gpu = s.backend->id != "cpu";
  const bool op_offload = gpu && shape.n_ubatch >= kOpOffloadMinBatch && s.op_offload_rule;
  // the KV cache of the layers in RAM is read by the GPU's attention too (the KV follows its layer: kv_cache_bytes)
  // (every layer's, as the weights: layers are alike, so the search over -ngl shares one graph)
  const int kv_layers = op_offload && place.first_gpu_layer > 0 ? m.layers : 0;
  ComputeBytes compute = s.compute(m, shape, tk, tv, c.flash_attn, *s.backend, true, sched_copies(s),
                                   op_offload ? c.weight_bytes.get() : nullptr, kv_layers);
  // Partial offload is checked against few GPU logs (tests/validation/gpu_logs: -ngl 16, 7 and 0 and --n-cpu-moe),
  // and the copies' rows are placed, not measured: the upper bound stays widened by half (docs/formulas.md §9).
  if (gpu) compute.device.high += compute.device.high / 2;
  const bool copies_in_graph = compute.from_graph && (!c.weight_bytes->host_weights.empty() || s.backend->id == "metal");
  if (op_offload && copies_in_graph) return compute;
  const Bytes copy = c.weight_bytes->largest_host_matrix;
  if (op_offload && s.backend->id != "metal") {
    compute.device.bytes += copy;
    compute.device.unpadded += copy;
    compute.device.high += copy;
  }
  if (op_offload && compute.from_graph) return compute;
  if (place.first_gpu_layer > 0) {
    const ComputeBytes cpu_part = s.compute(m, shape, tk, tv, c.flash_attn, s.cpu());
    compute.host.bytes += cpu_part.device.bytes;
    compute.host.unpadded += cpu_part.device.unpadded;
    compute.host.high += cpu_part.device.high;
  }
  return compute;
}

// Several GPUs (split mode layer): each GPU holds its layers' weights and KV (a contiguous range) and a compute
// buffer of its own; the logits block only where the output layer is. With every layer offloaded llama.cpp runs
// the GPUs as a pipeline (n_copies 4, ggml-backend.cpp): every split input is kept four times (graph model).
template <class Put, class PutKv>
void put_per_gpu(const Setup& s, const Candidate& c, const ContextShape& shape, const GgmlType& tk, const GgmlType& tv,
                 const ComputeBytes& compute, Put& put, PutKv& put_kv) {
  const ModelSpec& m = *s.model;
  const Placement& place = c.placement;
  const int last = m.layers;
  for (size_t d = 0; d < s.gpu_pools.size(); ++d) {
    const std::string& pool = s.gpu_pools[d];
    int begin = last, end = 0;
    for (int il = 0; il < m.layers; ++il)
      if (place.device_of(il) == static_cast<int>(d)) begin = std::min(begin, il), end = std::max(end, il + 1);
    put("weights", pool, c.weight_bytes->per_device.at(d));
    if (begin < end) put_kv(s.kv(m, shape, tk, tv, c.flash_attn, *s.backend, begin, end), pool);
    const bool holds_output = place.device_of(last) == static_cast<int>(d);
    if (begin >= end && !holds_output) continue;
    const ComputeBytes own = s.compute(m, shape, tk, tv, c.flash_attn, *s.backend, holds_output, sched_copies(s));
    Figure part = own.device;
    if (d == 0 && place.host_matmuls()) part = compute.device;  // the op-offload copy is on the main GPU
    // The closed forms do not count the pipeline's copies of the split inputs (the graph model does): doubled bound.
    if (s.resolved.pipeline_parallel && !own.from_graph) part.high *= 2;
    put("compute", pool, part);
  }
}

// The option's fields that follow from the candidate and the shape alone.
Option option_header(const Setup& s, const Candidate& c, const ContextShape& shape, int ctx) {
  Option o;
  o.weights = c.weights->id;
  o.ctx_size = ctx;
  o.ctx_per_slot = s.request.kv_unified ? shape.n_ctx : shape.n_ctx_seq;
  o.cache_type_k = c.k;
  o.cache_type_v = c.v;
  o.flash_attn = c.flash_attn;
  o.beyond_native = o.ctx_per_slot > s.model->ctx_native;
  o.below_task_min = o.ctx_per_slot < s.min_ctx;
  o.needs = c.needs;
  return o;
}

// Every allocation of a llama.cpp candidate at one context shape, in the plan's order: record(component, what, pool, figure).
template <class Record>
void record_allocations(const Setup& s, const Candidate& c, int ctx, const ContextShape& shape, Record& record) {
  const ModelSpec& m = *s.model;
  const EngineSpec& e = *s.engine;
  const GgmlType& tk = c.ggml_k(e);
  const GgmlType& tv = c.ggml_v(e);
  const Placement& place = c.placement;
  // KV of each layer lives on that layer's device (offload_kqv, llama-kv-cache.cpp dev_layer(il)).
  const KvCacheBytes kv = s.kv(m, shape, tk, tv, c.flash_attn, *s.backend, place.first_gpu_layer);
  const KvCacheBytes kv_host = s.kv(m, shape, tk, tv, c.flash_attn, s.cpu(), 0, place.first_gpu_layer);
  const ComputeBytes compute = placed_compute(s, c, shape, tk, tv);
  auto put = [&](const char* what, const std::string& pool, const Figure& f) {  // the names compared only for an empty figure
    if (f.bytes != 0 || ((std::strcmp(what, "k_cache") == 0 || std::strcmp(what, "v_cache") == 0) && pool == s.device_pool))
      record("main", what, pool, f);
  };
  auto put_kv = [&](const KvCacheBytes& k, const std::string& pool) { put_kv_parts(k, pool, put); };
  if (s.gpu_pools.size() <= 1) {
    put("weights", s.device_pool, c.weight_bytes->device);
    put_kv(kv, s.device_pool);
    put("compute", s.device_pool, compute.device);
  } else {
    put_per_gpu(s, c, shape, tk, tv, compute, put, put_kv);
  }
  put("weights_host", s.host_pool, c.weight_bytes->host);
  put_kv(kv_host, s.host_pool);
  put("compute_host", s.host_pool, compute.host);
  put("output", s.host_pool, output_bytes(m, shape));
  if (s.draft) add_draft(s, c, ctx, record);
  if (s.request.mmproj) add_projector(s, c, record);
}

// Whether a candidate's allocations other than its weights are the same for every weight format: the request's
// placement (kvplan's own placements differ per format) and no matmul weight in RAM (op offload copies the host
// weights into the GPU's compute buffer, so placed_compute reads them). Such candidates share the rest's sums.
bool rest_shared_by_formats(const Candidate& c) { return !c.placed_by_kvplan && !c.placement.host_matmuls(); }

Setup::RestKey rest_key(const Setup& s, const Candidate& c, int ctx) {
  const auto k = compute_type_key(c.ggml_k(*s.engine), true), v = compute_type_key(c.ggml_v(*s.engine), true);
  return {{}, {k[0], k[1], k[2], v[0], v[1], v[2], c.flash_attn ? 1 : 0, ctx}};
}

bool is_main_weights(const char* component, const char* what) {
  return what[0] == 'w' &&  // most records are caches and buffers: one character tells them apart
         (std::strcmp(what, "weights") == 0 || std::strcmp(what, "weights_host") == 0) && std::strcmp(component, "main") == 0;
}

constexpr std::string_view kHostKind = "host";  // Pool::kind of host RAM (compared as a view: no length to count)

// A figure's pool index from the pool id it carries: most carry the Setup's own device or host id, found by address
// (the sums run at every probe); another id by name. s.pools.size() where no pool has it.
class PoolIndex {
 public:
  explicit PoolIndex(const Setup& s) : s_(s), device_(s.pool_index(s.device_pool)), host_(s.pool_index(s.host_pool)) {}
  size_t operator()(const std::string& pool) const {
    return &pool == &s_.device_pool ? device_ : &pool == &s_.host_pool ? host_ : s_.pool_index(pool);
  }

 private:
  const Setup& s_;
  size_t device_, host_;
};

// The sums per pool of a llama.cpp candidate's allocations at ctx (without the main model's weights when
// skip_weights), as sum_pools adds them: a figure of no pool counts in none. With them what a token reads there
// (the weights_host figures of host RAM as they are: ranked_account takes the token_embd rows off each).
std::vector<Setup::PoolSums> pool_sums(const Setup& s, const Candidate& c, int ctx, bool skip_weights) {
  std::vector<Setup::PoolSums> sums(s.pools.size());
  const PoolIndex index_of(s);
  auto record = [&](const char* component, const char* what, const std::string& pool, const Figure& f) {
    if (skip_weights && is_main_weights(component, what)) return;
    const size_t i = index_of(pool);
    if (i >= sums.size()) return;
    sums[i].add(f, what);
    sums[i].weights_in_ram += sums[i].reads.add(what, f.bytes, 0, s.pools[i].kind == kHostKind) ? 1 : 0;
  };
  record_allocations(s, c, ctx, main_shape(s, c, ctx), record);
  return sums;
}

// The main model's weights as record_allocations puts them (a figure of 0 bytes is not recorded): put(pool, figure,
// what) for each.
template <class Put>
void for_each_main_weights(const Setup& s, const Candidate& c, Put&& put) {
  auto put_nonzero = [&](const std::string& pool, const Figure& f, const char* what) {
    if (f.bytes != 0) put(pool, f, what);
  };
  if (s.gpu_pools.size() <= 1) put_nonzero(s.device_pool, c.weight_bytes->device, "weights");
  else
    for (size_t d = 0; d < s.gpu_pools.size(); ++d) put_nonzero(s.gpu_pools[d], c.weight_bytes->per_device.at(d), "weights");
  put_nonzero(s.host_pool, c.weight_bytes->host, "weights_host");
}

// A candidate with weights in RAM on one GPU: what its allocations other than the main weights depend on, beyond the
// cache types, flash attention and context: where its layers' KV lives (the first GPU layer, the output layer) and
// the host matrices its GPU copies (their digest, and the largest: placed_compute). The placement search asks the
// same rest at every count of layers' experts in RAM (the copies are kept per name, not per layer). nullopt: no key
// (several GPUs split the rest by layer; -ot patterns).
std::optional<Setup::PlacedRestKey> placed_rest_key(const Setup& s, const Candidate& c, int ctx) {
  const Placement& p = c.placement;
  if (s.gpu_pools.size() > 1 || !p.split_points.empty() || !p.overrides.empty() || !c.type_k || !c.type_v) return std::nullopt;
  const WeightBytes& w = *c.weight_bytes;
  const auto k = compute_type_key(*c.type_k, true), v = compute_type_key(*c.type_v, true);
  return Setup::PlacedRestKey{{},
                              {k[0], k[1], k[2], v[0], v[1], v[2], c.flash_attn ? 1 : 0, ctx, p.first_gpu_layer,
                               p.output_on_gpu ? 1 : 0, static_cast<std::int64_t>(w.host_weights_digest), w.largest_host_matrix}};
}

// The sums of the allocations other than the main weights: shared by the formats where they do not depend on them,
// and by the placements of one format that keep the same rest.
const std::vector<Setup::PoolSums>& rest_sums(const Setup& s, const Candidate& c, int ctx, std::vector<Setup::PoolSums>& own) {
  if (!rest_shared_by_formats(c)) {
    const auto key = placed_rest_key(s, c, ctx);
    if (!key) return own = pool_sums(s, c, ctx, true);
    auto it = s.placed_rest_memo.find(*key);
    if (it == s.placed_rest_memo.end()) it = s.placed_rest_memo.emplace(*key, pool_sums(s, c, ctx, true)).first;
    return it->second;
  }
  const Setup::RestKey key = rest_key(s, c, ctx);
  auto it = s.rest_memo.find(key);
  if (it == s.rest_memo.end()) it = s.rest_memo.emplace(key, pool_sums(s, c, ctx, true)).first;
  return it->second;
}

// The tightest headroom over the pools (or the devices only, not host RAM) of the candidate's main weights and `rest`,
// the sums of its other allocations (nullptr: none), as sum_pools sums them.
Bytes least_headroom(const Setup& s, const Candidate& c, const std::vector<Setup::PoolSums>* rest, bool devices_only) {
  Bytes least = std::numeric_limits<Bytes>::max();
  const PoolIndex index_of(s);
  for (size_t i = 0; i < s.pools.size(); ++i) {
    if (devices_only && s.pools[i].kind == kHostKind) continue;
    Setup::PoolSums sum;  // the rest's, and the main weights in this pool (the rest is not copied: the search asks often)
    if (rest) sum.bytes = (*rest)[i].bytes, sum.high = (*rest)[i].high;
    for_each_main_weights(s, c, [&](const std::string& pool, const Figure& f, const char* what) {
      if (index_of(pool) == i) sum.add(f, what);
    });
    PoolUsage u;
    u.allocations = sum.bytes, u.allocations_high = sum.high;
    least = std::min(least, pool_usage(s.pools[i], u).headroom);
  }
  return least;
}

// The smallest headroom over the pools of a llama.cpp candidate at ctx (negative: it does not fit), without
// building the option: the context search asks it several times per candidate, and for every weight format at the
// same contexts, so the allocations other than the weights are summed once per (K, V, flash attention, context)
// where they do not depend on the format. The pools are summed as sum_pools does, with the same checks.
// The tightest headroom at `ctx` over every pool, or over the devices only (not host RAM).
Bytes headroom_at(const Setup& s, const Candidate& c, int ctx, bool devices_only = false) {
  std::vector<Setup::PoolSums> own;
  return least_headroom(s, c, &rest_sums(s, c, ctx, own), devices_only);
}

}  // namespace

int linear_guess(int lo, Bytes headroom_lo, int hi, Bytes headroom_hi) {
  const double t = static_cast<double>(headroom_lo) / (static_cast<double>(headroom_lo) - static_cast<double>(headroom_hi));
  return std::clamp(lo + static_cast<int>(t * (hi - lo)), lo + 1, hi - 1);
}

Bytes devices_headroom(const Setup& s, const Candidate& c, int ctx) { return headroom_at(s, c, ctx, true); }

double context_bound(const Setup& s, const Candidate& c, int cap) {
  const Placement& p = c.placement;
  if (s.own_memory || s.gpu_pools.size() > 1 || p.first_gpu_layer > 0 || p.cpu_moe_layers > 0 || !p.output_on_gpu ||
      !p.overrides.empty() || !p.split_points.empty() || !c.type_k || !c.type_v || s.device_pool == s.host_pool)
    return HUGE_VAL;
  const Pool& device = s.pools[s.pool_index(s.device_pool)];
  if (!device.bounded()) return HUGE_VAL;
  // The cache's growing parts at the cap: per token at least their share there at any shorter context (full layers
  // grow with the context, sliding ones less, padding only adds).
  const ContextShape at_cap = main_shape(s, c, cap);
  const KvCacheBytes kv = s.kv(*s.model, at_cap, *c.type_k, *c.type_v, c.flash_attn, *s.backend);
  const double growing = static_cast<double>(kv.k.bytes) + static_cast<double>(kv.v.bytes) + static_cast<double>(kv.swa_k.bytes) +
                         static_cast<double>(kv.swa_v.bytes);
  const double room = static_cast<double>(device.budget()) - static_cast<double>(c.weight_bytes->device.high);
  if (growing <= 0 || room >= growing) return HUGE_VAL;
  const double tokens = s.request.kv_unified ? at_cap.n_ctx : at_cap.n_ctx_seq;  // per slot at the cap (option_header's)
  return std::max(0.0, room) / growing * tokens;
}

int reaches_cap(const Setup& s, const Candidate& c, int cap) {
  const int step = s.engine->ctx_pad * (s.request.kv_unified ? 1 : s.request.n_parallel);
  const int top = cap / step * step;  // largest_fitting_ctx's and largest_round_ctx's first probe
  return top >= step && !weights_alone_overflow(s, c) && headroom_at(s, c, top) >= 0 ? top : 0;
}

Bytes weights_alone_headroom(const Setup& s, const Candidate& c) { return least_headroom(s, c, nullptr, false); }
bool weights_alone_overflow(const Setup& s, const Candidate& c) { return weights_alone_headroom(s, c) < 0; }

namespace {

// Which of the candidate's weight figures a main-weights record is (by address): -1 device, -2 host, d: per_device[d].
int weights_figure(const Candidate& c, const Figure& f) {
  if (&f == &c.weight_bytes->device) return -1;
  if (&f == &c.weight_bytes->host) return -2;
  return static_cast<int>(&f - c.weight_bytes->per_device.data());
}
const Figure& weights_figure(const Candidate& c, int which) {
  return which == -1 ? c.weight_bytes->device : which == -2 ? c.weight_bytes->host : c.weight_bytes->per_device.at(static_cast<size_t>(which));
}

// Every weights figure of the candidate is recorded (a figure of 0 bytes is not): its list has every weights slot.
bool records_every_weights_figure(const Setup& s, const Candidate& c) {
  const WeightBytes& w = *c.weight_bytes;
  if (w.host.bytes == 0) return false;
  if (s.gpu_pools.size() <= 1) return w.device.bytes != 0;
  return std::all_of(w.per_device.begin(), w.per_device.end(), [](const Figure& f) { return f.bytes != 0; });
}

}  // namespace

// The candidate's allocations in record_allocations' order. Where the rest does not depend on the weight format, the
// list is built once per (K, V, flash attention, context), its main-weights entries as slots that each candidate
// fills with its own figures.
Option account(const Setup& s, const Candidate& c, int ctx) {
  if (s.own_memory) return account_runtime(s, c, ctx);
  const ContextShape shape = main_shape(s, c, ctx);
  Option o = option_header(s, c, shape, ctx);
  o.allocations.reserve(16);
  const bool shared = rest_shared_by_formats(c);
  const Setup::RestKey key = rest_key(s, c, ctx);
  auto found = shared ? s.rest_allocations_memo.find(key) : s.rest_allocations_memo.end();
  if (found == s.rest_allocations_memo.end()) {
    Setup::RestAllocations rest;
    auto record = [&](const char* component, const char* what, const std::string& pool, const Figure& f) {
      if (is_main_weights(component, what)) rest.slots.push_back({rest.rest.size(), what, &pool, weights_figure(c, f)});
      else rest.rest.push_back({component, what, &pool, f});
      o.allocations.push_back({component, what, pool, f});
    };
    record_allocations(s, c, ctx, shape, record);
    if (shared && records_every_weights_figure(s, c)) s.rest_allocations_memo.emplace(key, std::move(rest));
  } else {
    const Setup::RestAllocations& rest = found->second;
    auto slot = rest.slots.begin();
    for (size_t i = 0; i <= rest.rest.size(); ++i) {
      for (; slot != rest.slots.end() && slot->at == i; ++slot)
        if (const Figure& f = weights_figure(c, slot->figure); f.bytes != 0) o.allocations.push_back({"main", slot->what, *slot->pool, f});
      if (i < rest.rest.size()) o.allocations.push_back({rest.rest[i].component, rest.rest[i].what, *rest.rest[i].pool, rest.rest[i].figure});
    }
  }
  sum_pools(s, o);
  return o;
}


namespace {
// ranked_account from the allocation list, where the pool sums cannot say what a token reads.
Option ranked_from_list(const Setup& s, const Candidate& c, int ctx, SpeedInputs& speed) {
  Option o = account(s, c, ctx);
  speed = speed_inputs(s, c, o);
  o.allocations.clear();
  return o;
}
}  // namespace

Option ranked_account(const Setup& s, const Candidate& c, int ctx, SpeedInputs& speed) {
  if (s.own_memory) throw std::logic_error("ranked_account: an engine that sizes its own memory has no pool sums");
  std::vector<Setup::PoolSums> own;
  const std::vector<Setup::PoolSums>& rest = rest_sums(s, c, ctx, own);
  const Bytes lookup = c.weight_bytes->lookup_host;
  // each weights_host figure is less the token_embd rows on its own (speed_inputs): a pool's sum of several cannot be
  // (returned as a temporary, so that the option below is built in place: the ranker sizes every candidate)
  if (std::any_of(rest.begin(), rest.end(), [](const Setup::PoolSums& p) { return p.weights_in_ram > 1; }))
    return ranked_from_list(s, c, ctx, speed);
  const ContextShape shape = main_shape(s, c, ctx);
  Option o = option_header(s, c, shape, ctx);
  speed = SpeedInputs{};
  o.pools.resize(s.pools.size());
  speed.pools.reserve(s.pools.size());
  for (size_t i = 0; i < s.pools.size(); ++i) {  // the rest's sums, then the main weights added as PoolSums::add does
    o.pools[i].pool = s.pools[i].id;
    o.pools[i].allocations = rest[i].bytes, o.pools[i].allocations_high = rest[i].high;
    speed.pools.push_back(rest[i].reads);
    speed.pools[i].weights_in_ram = std::max<Bytes>(0, rest[i].reads.weights_in_ram - (rest[i].weights_in_ram ? lookup : 0));
  }
  for_each_main_weights(s, c, [&](const std::string& pool, const Figure& f, const char* what) {
    speed.main_weights += f.bytes;
    if (std::string_view(what) == "weights") speed.main_weights_on_devices += f.bytes;
    const size_t i = s.pool_index(pool);
    if (i >= o.pools.size()) return;
    o.pools[i].allocations = checked_add(o.pools[i].allocations, f.bytes, what);
    o.pools[i].allocations_high = checked_add(o.pools[i].allocations_high, f.high, what);
    speed.pools[i].add(what, f.bytes, lookup, s.pools[i].kind == kHostKind);
  });
  for (size_t i = 0; i < s.pools.size(); ++i) o.pools[i] = pool_usage(s.pools[i], std::move(o.pools[i]));
  return o;
}

// The largest context (a multiple of 256, at most `cap`) at which the option fits; 0 if none. Memory grows
// almost linearly with the context: after the cap and one step, last_fitting's linear guess (four probes instead
// of the bisection's nine).
int largest_fitting_ctx(const Setup& s, const Candidate& c, int cap) {
  // Without unified KV each slot gets PAD(ctx / n_parallel, 256): step by whole slots.
  const int step = s.own_memory ? 256 : s.engine->ctx_pad * (s.request.kv_unified ? 1 : s.request.n_parallel);
  const int hi = cap / step;  // in steps
  if (hi < 1 || (!s.own_memory && weights_alone_overflow(s, c))) return 0;
  if (!s.own_memory && hi > 2) {
    auto headroom = [&](int steps) { return headroom_at(s, c, steps * step); };
    const Bytes at_cap = headroom(hi);
    if (at_cap >= 0) return hi * step;
    const Bytes at_one = headroom(1);
    if (at_one < 0) return 0;
    return last_fitting(1, at_one, hi, at_cap, headroom) * step;
  }
  auto fits = [&](int steps) { return s.own_memory ? account(s, c, steps * step).fits() : headroom_at(s, c, steps * step) >= 0; };
  if (fits(hi)) return hi * step;
  int lo = 0, top = hi;  // lo fits (or is 0), top does not
  while (top - lo > 1) {
    const int mid = (lo + top) / 2;
    (fits(mid) ? lo : top) = mid;
  }
  return lo * step;
}

// The context the ranking offers a candidate: the largest that fits up to the cap, rounded below the cap to a
// multiple of 1024 per slot from 2048 per slot on (size_option's round numbers), else a multiple of 256 per slot.
// Searched on the 1024 grid first and on the 256 grid only below 2048 per slot: the formats' and cache types'
// probes then meet at the same contexts (one compute graph, one sum of the rest each), and the rounding needs
// no finer answer. Where the headroom is monotone this is largest_fitting_ctx's answer rounded as size_option does.
int largest_round_ctx(const Setup& s, const Candidate& c, int cap) {
  const int slots = s.request.kv_unified ? 1 : s.request.n_parallel;
  const int fine = s.engine->ctx_pad * slots, coarse = kRoundCtx * slots;
  if (s.own_memory || fine <= 0 || coarse % fine != 0 || cap / fine <= 2) return largest_fitting_ctx(s, c, cap);
  if (weights_alone_overflow(s, c)) return 0;
  std::vector<std::pair<int, Bytes>> seen;  // the probes so far: a bracket's ends are asked again
  auto headroom = [&](int ctx) {
    for (const auto& [x, h] : seen)
      if (x == ctx) return h;
    seen.emplace_back(ctx, headroom_at(s, c, ctx));
    return seen.back().second;
  };
  const int top = cap / fine * fine;  // largest_fitting_ctx's first probe
  const Bytes at_top = headroom(top);
  if (at_top >= 0) return top;
  // the largest fitting multiple of `coarse` below top: k in [1, k_top), k_top standing for top itself
  const int k_top = (top + coarse - 1) / coarse;
  auto at_k = [&](int k) { return headroom(k < k_top ? k * coarse : top); };
  int found = 0;  // in units of coarse
  if (k_top > 1) {
    const Bytes at_one = at_k(1);
    if (at_one >= 0) found = last_fitting(1, at_one, k_top, at_top, at_k);
  }
  if (found * coarse >= 2 * coarse) return found * coarse;  // at least 2048 per slot: the round number
  // below 2048 per slot: the exact multiple of `fine` in [found, found + 1) coarse steps, below top
  const int lo = found * coarse / fine, hi = std::min(top, (found + 1) * coarse) / fine;
  auto at_step = [&](int n) { return headroom(n * fine); };
  if (lo == 0) {
    if (hi <= 1 || at_step(1) < 0) return 0;
    return last_fitting(1, at_step(1), hi, at_step(hi), at_step) * fine;
  }
  return last_fitting(lo, at_step(lo), hi, at_step(hi), at_step) * fine;
}

}  // namespace kvplan::detail

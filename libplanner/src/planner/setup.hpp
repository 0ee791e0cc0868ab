// Internal to plan(): the resolved request (Setup), the candidates, and the stages' functions. Each stage
// lives in its own file of libplanner/src/planner/ (docs/ranking.md describes the flow).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engines/llama_cpp.hpp"
#include "engines/runtimes.hpp"
#include "kvplan/memory.hpp"
#include "kvplan/plan.hpp"
#include "memory/transformer_graph.hpp"
#include "memory/weights.hpp"
#include "priors/prior.hpp"

namespace kvplan::detail {

// A pool's KV allocations under their JSON names (the main model and a draft list them alike).
inline constexpr std::array<std::string_view, 5> kKvParts{"k_cache", "v_cache", "swa_k_cache", "swa_v_cache", "state"};
inline bool is_kv_part(std::string_view what) {
  for (std::string_view part : kKvParts)
    if (what == part) return true;
  return false;
}
template <class Put>
void put_kv_parts(const KvCacheBytes& k, const std::string& pool, Put& put) {
  put("k_cache", pool, k.k);
  put("v_cache", pool, k.v);
  put("swa_k_cache", pool, k.swa_k);
  put("swa_v_cache", pool, k.swa_v);
  put("state", pool, k.state);
}

constexpr int kMinCtx = 256;
// Ranked options below the cap use round contexts: multiples of this per slot from twice it per slot on (size_option;
// largest_round_ctx searches on that grid).
constexpr int kRoundCtx = 1024;
constexpr int kMaxCtx = 1 << 28;  // a pinned -c beyond any model's window times 16 slots is a typo, not a plan
// Host RAM when neither --ram nor the machine says: a common desktop's 32 GiB (stated in the plan's warnings).
constexpr Bytes kAssumedHostRam = 32LL << 30;

// A memo key of catalog pointers and integers, hashed (FNV-1a): an ordered map's tuple compares cost the planner's
// probes more than some of the figures they look up.
template <std::size_t P, std::size_t D>
struct FlatKey {
  std::array<const void*, P> ptrs;
  std::array<std::int64_t, D> dims;
  bool operator==(const FlatKey& o) const {  // element by element: std::array's == calls memcmp at every hit
    for (std::size_t i = 0; i < P; ++i)
      if (ptrs[i] != o.ptrs[i]) return false;
    for (std::size_t i = 0; i < D; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
};
struct FlatKeyHash {
  template <std::size_t P, std::size_t D>
  std::size_t operator()(const FlatKey<P, D>& k) const {
    std::uint64_t h = 1469598103934665603ULL;
    auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
    for (const void* p : k.ptrs) mix(reinterpret_cast<std::uintptr_t>(p));
    for (std::int64_t d : k.dims) mix(static_cast<std::uint64_t>(d));
    return static_cast<std::size_t>(h);
  }
};

// compute_bytes depends on the shape and the cache types, not on the weight format: the ranker asks for the same
// figure once per format, and each is a reserve graph built and placed (docs/benchmarks.md). The figure does not
// depend on the device's memory or the weights either, so the re-plans that verify a plan's suggestions (a larger
// card, unpinned settings) ask for many of the same ones. The last field is the digest of the host weights a GPU
// copies under op offload (0: none).
using ComputeKey = FlatKey<3, 20>;  // engine, model, backend; K and V type keys, shape, flags, host weights' digest
// The compute figures one plan() call works out, shared with its suggestions' re-plans (passed down to them, never
// global: plan() stays a function of the catalog and the request). Every pointer in a key is the catalog's or the
// outer request's (model_spec, model_draft_spec), which outlive the call.
struct ComputeMemo {
  std::unordered_map<ComputeKey, ComputeBytes, FlatKeyHash> figures;
  // Each catalog format's tensors sized once per (model, format, engine, backend): a pinned plan's verifying re-plans
  // size the same formats again otherwise (a GGUF's own format lives in its Setup and is not shared).
  std::unordered_map<FlatKey<4, 0>, SizedWeights, FlatKeyHash> sized;
  // The reserve-graph cut that last held per model (compute_bytes' cut_hint): a hybrid's holds at twice its period.
  std::unordered_map<const ModelSpec*, int> cut_hints;
  // Graphs with host matrices' copies, used again for other weight formats (their copies resized).
  GraphReuse graphs;
  // The layers' sums of `sized`'s entries (sum_layers), worked out when a placement first puts a format's layers or
  // experts in RAM: a placement search asks for them at every probe, most plans never.
  std::unordered_map<const SizedWeights*, std::optional<SizedLayers>> layer_sums;
};

// What one decoded token reads from a pool (speed.cpp): the weights there, those in RAM less the token_embd rows
// (only looked up, a row per token), and the KV cache of every conversation.
struct TokenReads {
  Bytes weights = 0, weights_in_ram = 0, kv = 0;
  // One allocation of kind `what` (weights, weights_host, k_cache ...; others read nothing per token) in a pool that
  // is host RAM or not (a device does not read host weights). True: it was a weights_host figure read here.
  bool add(std::string_view what, Bytes bytes, Bytes lookup, bool host_pool);
};
// The speed estimate's inputs: per pool what a token reads, and the main model's weights (all, and on the devices).
struct SpeedInputs {
  std::vector<TokenReads> pools;
  Bytes main_weights = 0, main_weights_on_devices = 0;
};

// Everything about the request that does not depend on the option.
struct Setup {
  const Catalog* catalog = nullptr;
  const EngineSpec* engine = nullptr;    // llama.cpp's rules: its memory model, and the architecture table for every engine
  const RuntimeProfile* runtime = nullptr;  // another engine (nullptr: llama.cpp itself)
  bool own_memory = false;               // the runtime sizes memory itself (all but Ollama, which runs llama.cpp)
  int activation_tokens = 0;             // the batch the runtime sizes activations for
  const Interconnect* interconnect = nullptr;  // several nodes: the link between them
  bool tp_spans_nodes = false;           // a tensor-parallel group larger than a node
  int stage_crossings = 0;               // pipeline stage boundaries that cross nodes
  const BackendSpec* backend = nullptr;
  const ModelSpec* model = nullptr;
  const TaskProfile* task = nullptr;
  const GpuSpec* gpu = nullptr;
  Request request;
  Resolved resolved;
  std::vector<Pool> pools;
  std::string device_pool, host_pool;
  std::vector<std::string> gpu_pools;  // gpu0, gpu1, … (empty for unified memory and the CPU)
  std::map<std::string, double> pool_bandwidth;  // GB/s per pool (the catalog GPU's; host: --ram-bandwidth or 60)
  std::map<std::string, double> pool_tflops;     // FP16 tensor TFLOPS per GPU pool (catalog)
  int ctx_allowed = 0;     // the longest context the plan may use (native, or rope-scaled)
  // The task's target and minimum per conversation, capped by ctx_allowed: a model whose window is shorter
  // than the task wants is planned to its window, never to a token count below it (docs/ranking.md §3).
  int target_ctx = 0, min_ctx = 0;
  bool auto_placement = false;  // kvplan may keep layers or experts in RAM when the model does not fit the GPU
  bool rotation_rule = false;
  // Looked up once by name (account.cpp asks at every probe): the engine's op_offload rule and its CPU backend.
  bool op_offload_rule = false;
  const BackendSpec* cpu_backend = nullptr;  // nullptr: the engine has none (cpu() then says so, as a lookup would)
  const BackendSpec& cpu() const { return cpu_backend ? *cpu_backend : engine->backend("cpu"); }
  WeightFormat file_format;  // a GGUF's own format when it is not in the catalog (quality unknown)
  Placement placement;       // which layers and experts live on the GPU
  struct Draft {             // speculative decoding: the draft model and its context's settings
    const ModelSpec* model = nullptr;
    const WeightFormat* catalog_format = nullptr;  // nullptr: the file's own (file_format)
    WeightFormat file_format;
    Placement placement;
    std::string type_k = "f16", type_v = "f16";
    const WeightFormat& format() const { return catalog_format ? *catalog_format : file_format; }
  };
  std::optional<Draft> draft;
  mutable std::optional<WeightBytes> draft_weights;  // the draft's weights, worked out on first use
  std::vector<std::string> warnings;  // plan-level notes found while resolving

  std::shared_ptr<ComputeMemo> compute_memo = std::make_shared<ComputeMemo>();  // plan_sharing() passes the outer call's
  // layer_caches of the main model and of the draft, worked out on first use (account() asks per candidate and context).
  // With them the runs of identical layers, which kv_cache_bytes would otherwise find at every context.
  struct ModelLayers {
    std::vector<LayerCache> caches;
    std::vector<int> run_ends;
  };
  mutable std::map<const ModelSpec*, ModelLayers> layers_memo;
  const ModelLayers& model_layers(const ModelSpec& m) const {
    auto it = layers_memo.find(&m);
    if (it == layers_memo.end()) {
      ModelLayers l{layer_caches(m, *engine), {}};
      l.run_ends = layer_run_ends(l.caches);
      it = layers_memo.emplace(&m, std::move(l)).first;
    }
    return it->second;
  }
  const std::vector<LayerCache>& layers_of(const ModelSpec& m) const { return model_layers(m).caches; }
  // Each (K, V) pair of the engine's cache types as the prior sees it, and what the measurements say of its cell:
  // the same for every weight format and context (score.cpp).
  struct ScoreCell {
    std::string type_k, type_v;  // the prior's names in their roles
    bool rotation = false;
    const TypeSensitivity* k = nullptr;
    const TypeSensitivity* v = nullptr;
    priors::CellEvidence evidence;
    std::unordered_map<int, double> kv_loss_at;  // the cache loss per context: the same for every format and setting
  };
  // Looked up by a pair of views (no names copied per candidate): hash and equality are transparent.
  using NamePair = std::pair<std::string_view, std::string_view>;
  struct NamePairHash {
    using is_transparent = void;
    size_t operator()(NamePair p) const { return std::hash<std::string_view>{}(p.first) * 31 + std::hash<std::string_view>{}(p.second); }
  };
  struct NamePairEqual {
    using is_transparent = void;
    bool operator()(NamePair a, NamePair b) const { return a == b; }
  };
  mutable std::unordered_map<std::pair<std::string, std::string>, ScoreCell, NamePairHash, NamePairEqual> score_cells;
  // Weight bytes per (format, placement): the placement search asks for the same layers' split once per K/V pair,
  // and its candidates share them.
  using WeightsKey = std::tuple<const WeightFormat*, int, int, bool>;
  mutable std::map<WeightsKey, std::shared_ptr<const WeightBytes>> weights_memo;
  // Each format's tensors sized once: the placement search then only places them (memory/weights.hpp).
  mutable std::map<const WeightFormat*, SizedWeights> sized_memo;  // the file's own format (catalog ones: compute_memo)
  const SizedWeights& sized(const WeightFormat& f) const {
    auto size_once = [&](auto& memo, const auto& key) -> const SizedWeights& {
      auto it = memo.find(key);
      if (it == memo.end()) it = memo.emplace(key, sized_weights(*model, f, *engine, *backend, false)).first;
      return it->second;
    };
    if (&f == &file_format) return size_once(sized_memo, &f);  // lives in this Setup: not shared with re-plans
    return size_once(compute_memo->sized, FlatKey<4, 0>{{model, &f, engine, backend}, {}});
  }
  // A format's layer sums (sum_layers; none: its parts allow none), shared with the re-plans as its tensors are (a
  // file's own format's kept in this Setup, as its tensors are).
  mutable std::map<const WeightFormat*, std::optional<SizedLayers>> file_layer_sums;
  const SizedLayers* layer_sums(const WeightFormat& f) const {
    auto once = [&](auto& memo, const auto& key) -> const SizedLayers* {
      auto it = memo.find(key);
      if (it == memo.end()) it = memo.emplace(key, sum_layers(sized(f), model->layers)).first;
      return it->second ? &*it->second : nullptr;
    };
    if (&f == &file_format) return once(file_layer_sums, &f);
    return once(compute_memo->layer_sums, &sized(f));
  }
  // A pool's sums of a candidate's allocations (typical and upper bound), as sum_pools adds them.
  struct PoolSums {
    Bytes bytes = 0, high = 0;
    TokenReads reads;  // of the allocations other than the main weights (ranked_account adds those)
    int weights_in_ram = 0;  // how many weights_host figures `reads` holds: each is less the token_embd rows on its own
    void add(const Figure& f, const char* what) { bytes = checked_add(bytes, f.bytes, what), high = checked_add(high, f.high, what); }
  };
  // The pools' sums of every allocation but the main model's weights, per (K and V types, flash attention, context),
  // for candidates whose rest does not depend on the weight format (account.cpp rest_shared_by_formats): the context
  // search of every format probes the same contexts. The types by compute_type_key with row sizes (everything the
  // sizing reads of a type): q4_0 and iq4_nl share their sums.
  using RestKey = FlatKey<0, 8>;
  mutable std::unordered_map<RestKey, std::vector<PoolSums>, FlatKeyHash> rest_memo;
  // The same for candidates with weights in RAM on one GPU, per what their rest depends on (account.cpp
  // placed_rest_key): K and V types (as RestKey); flash attention, context, first GPU layer, output layer, host
  // matrices' digest and largest one.
  using PlacedRestKey = FlatKey<0, 12>;
  mutable std::unordered_map<PlacedRestKey, std::vector<PoolSums>, FlatKeyHash> placed_rest_memo;
  // The same candidates' allocation lists without the main model's weights, and where each weights entry goes
  // (account.cpp account): `at` is its index among the rest, `figure` which of the candidate's weight figures.
  struct RestAllocations {
    struct Slot {
      size_t at;
      const char* what;
      const std::string* pool;
      int figure;  // -1 device, -2 host, d >= 0: per_device[d]
    };
    struct Entry {  // an Allocation by reference: its names are literals and the Setup's pool ids
      const char* component;
      const char* what;
      const std::string* pool;
      Figure figure;
    };
    std::vector<Entry> rest;
    std::vector<Slot> slots;
  };
  mutable std::unordered_map<RestKey, RestAllocations, FlatKeyHash> rest_allocations_memo;
  size_t pool_index(const std::string& id) const {
    size_t i = 0;
    while (i < pools.size() && pools[i].id != id) ++i;
    return i;
  }
  // KV bytes per (model, backend, cells, streams, sequences, layer range, types, flash attention): every weight format
  // of a candidate asks the same at each probed context.
  using KvKey = FlatKey<4, 7>;  // model, backend, K and V types; cells, streams, SWA cells, sequences, layers, FA
  mutable std::unordered_map<KvKey, KvCacheBytes, FlatKeyHash> kv_memo;
  KvCacheBytes kv(const ModelSpec& m, const ContextShape& sh, const GgmlType& tk, const GgmlType& tv, bool fa, const BackendSpec& b,
                  int layer_begin = 0, int layer_end = -1) const {
    if (layer_end == 0) return {};  // no layer in the range: every layer on the GPU leaves none in RAM (asked at each probe)
    const KvKey key{{&m, &b, &tk, &tv}, {sh.n_ctx_seq, sh.n_stream, sh.swa_cells, sh.n_seq, layer_begin, layer_end, fa ? 1 : 0}};
    auto it = kv_memo.find(key);
    if (it == kv_memo.end())
      it = kv_memo.emplace(key, kv_cache_bytes(model_layers(m).caches, *engine, sh, tk, tv, fa, b, layer_begin, layer_end,
                                               &model_layers(m).run_ends)).first;
    return it->second;
  }
  ComputeBytes compute(const ModelSpec& m, const ContextShape& sh, const GgmlType& tk, const GgmlType& tv, bool fa,
                       const BackendSpec& b, bool holds_output = true, int n_copies = 1,
                       const WeightBytes* host_weights = nullptr, int host_kv_layers = 0) const {
    const bool copies = host_weights && !host_weights->host_weights.empty();
    const std::uint64_t digest = copies ? host_weights->host_weights_digest : 0;
    const bool row_sizes = compute_reads_row_sizes(m, fa, host_kv_layers);
    const auto k = compute_type_key(tk, row_sizes), v = compute_type_key(tv, row_sizes);
    const ComputeKey key{{engine, &m, &b},
                         {k[0], k[1], k[2], v[0], v[1], v[2], sh.n_ctx, sh.n_ctx_seq, sh.n_stream, sh.n_seq, sh.unified ? 1 : 0, sh.n_ubatch, sh.n_batch, sh.swa_cells,
                          sh.n_outputs, n_copies, host_kv_layers, fa ? 1 : 0, holds_output ? 1 : 0, static_cast<std::int64_t>(digest)}};
    auto& figures = compute_memo->figures;
    auto it = figures.find(key);
    if (it == figures.end())
      it = figures
               .emplace(key, compute_bytes(layers_of(m), m, *engine, sh, tk, tv, fa, b, holds_output, n_copies,
                                           HostResident{copies ? &host_weights->host_weights : nullptr, host_kv_layers},
                                           &compute_memo->cut_hints[&m], &compute_memo->graphs))
               .first;
    return it->second;
  }
};

struct Candidate {  // one (weights, K, V, flash attention) combination the engine accepts
  const WeightFormat* weights = nullptr;
  std::string k, v;
  bool flash_attn = true;
  bool slow = false;
  std::vector<std::string> needs;
  std::string slow_reason;
  // its weights' figures, shared by the candidates of one format and placement (the ranker sizes ~1,200 of them)
  std::shared_ptr<const WeightBytes> weight_bytes;
  Placement placement;       // where its layers and experts live (the request's, or one kvplan chose)
  bool placed_by_kvplan = false;  // the placement is kvplan's choice: the launch line states it (-ngl, --n-cpu-moe)
  // k and v as llama.cpp's ggml types, found once by name (nullptr for another engine's cache types): the context
  // search reads them at every probe.
  const GgmlType* type_k = nullptr;
  const GgmlType* type_v = nullptr;
  // its (K, V) cell of the quality prior in the plan's Setup, found once per setting (enumerate); nullptr: looked up
  // by name (the bounds and scores read it for every candidate)
  Setup::ScoreCell* cell = nullptr;
  const GgmlType& ggml_k(const EngineSpec& e) const { return type_k ? *type_k : e.type(k, "--cache-type-k"); }
  const GgmlType& ggml_v(const EngineSpec& e) const { return type_v ? *type_v : e.type(v, "--cache-type-v"); }
};


// ---- resolve.cpp: the request as the engine will see it ----
Setup resolve(const Catalog& c, const Request& request);
std::vector<std::string> cache_type_ids(const Setup& s);
// Serving engines (planner/serving.cpp): parallelism, nodes, admitted sequences, the prefill chunk; checkpoints.
void resolve_serving(Setup& s, Bytes device_total);
bool has_checkpoint(const Setup& s, const WeightFormat& f);
engines::PairCheck check_runtime_pair(const Setup& s, const std::string& k, const std::string& v);

// ---- enumerate.cpp: the (weights, K, V, flash attention) combinations the engine accepts ----
// with_weights: each candidate's weight figures at the request's placement (else left empty, for the sizer to fill
// as it needs them: the ranking leaves most formats unsized in rank mode).
std::vector<Candidate> enumerate(const Setup& s, bool with_weights = true);
// The candidates' indices grouped by (K, V, flash attention), each group in the candidates' order (enumerate lists
// them format by format): the order in which plan() places them, so that a setting's formats, whose partial-offload
// graphs differ only in the host copies' sizes, follow one another (GraphReuse).
std::vector<size_t> settings_major(const std::vector<Candidate>& cs);
// An Unsloth Dynamic (UD-*) mix named without its file: its per-tensor types are only in the header.
[[noreturn]] void reject_dynamic_quant(const std::string& flag, const std::string& value);
// Shared: the candidates of one format and placement hold the same figures.
std::shared_ptr<const WeightBytes> candidate_weight_bytes(const Setup& s, const WeightFormat& f, const Placement& placement);
// The weights of a catalog model at the fewest bits per weight of any GGUF format it may be planned in (its base
// type; the recipes only raise tensors above it): a lower bound on what any plan of it holds.
double least_weight_bytes(const Catalog& c, const ModelSpec& m);
// Every pool's capacity together, the devices' and host RAM (0 when a pool is unbounded or the engine sizes its own
// memory): no llama.cpp plan's weights exceed it.
Bytes room_for_weights(const Setup& s);
// The model's weights at the fewest bits exceed that room (a known one): no option of it fits there.
bool weights_exceed_room(const Catalog& c, const ModelSpec& m, Bytes room);

// ---- account.cpp: every allocation of one candidate at one context, pool by pool ----
Option account(const Setup& s, const Candidate& c, int ctx);
// The same option as the ranking weighs it, without the allocation list (only the options shown need it:
// dress_option): its pools summed as account() sums them, and the speed estimate's inputs. llama.cpp's memory model
// only (not an engine that sizes its own memory).
Option ranked_account(const Setup& s, const Candidate& c, int ctx, SpeedInputs& speed);
// The tightest headroom of the GPU(s) alone at `ctx`, whatever host RAM says (llama.cpp's own memory model only;
// negative: they do not hold it).
Bytes devices_headroom(const Setup& s, const Candidate& c, int ctx);
// The candidate's main weights alone overflow a pool (llama.cpp's memory model): every other allocation only adds to
// them (none is negative), so it fits at no context. A context search then answers 0 without probing (each probe a
// reserve graph: a format too large for the card cost a plan two graphs per cache-type setting), and plan() sizes
// its option only if nothing fits (the only time a failing option is read).
bool weights_alone_overflow(const Setup& s, const Candidate& c);
// The tightest headroom over the pools with the main weights alone: its negative bounds an option's shortfall below.
Bytes weights_alone_headroom(const Setup& s, const Candidate& c);
int largest_fitting_ctx(const Setup& s, const Candidate& c, int cap);
// The context searches' first probe alone: the largest multiple of the step within the cap where the candidate fits
// there (what both searches then answer), else 0 (they answer less).
int reaches_cap(const Setup& s, const Candidate& c, int cap);
// The most tokens per slot the candidate at the request's placement (every layer on one GPU) could fit: the GPU's
// budget less its weights, over what the cache takes per token at the cap (HUGE_VAL: no bound known, or the cap fits
// that room).
double context_bound(const Setup& s, const Candidate& c, int cap);
// Its answer as the ranking offers it: below the cap, a multiple of 1024 per slot from 2048 per slot on.
int largest_round_ctx(const Setup& s, const Candidate& c, int cap);
// Where the headroom reaches zero between two probes, if memory grew linearly between them.
int linear_guess(int lo, Bytes headroom_lo, int hi, Bytes headroom_hi);
// The largest n in [lo, hi) with headroom(n) >= 0, given headroom(lo) = h_lo >= 0 > headroom(hi) = h_hi, for a
// headroom that falls about linearly in n (per context step, per layer on the GPU): a linear guess and the step
// after it usually bracket the answer (two probes instead of log2(hi - lo)); a bisection finishes whatever they
// miss. Wherever the headroom is monotone the answer is the bisection's.
template <class Headroom>
int last_fitting(int lo, Bytes h_lo, int hi, Bytes h_hi, Headroom&& headroom) {
  auto fits = [&](int n) { return headroom(n) >= 0; };
  if (hi - lo > 1) {
    const int guess = linear_guess(lo, h_lo, hi, h_hi);
    (fits(guess) ? lo : hi) = guess;
    if (lo == guess && guess + 1 < hi) (fits(guess + 1) ? lo : hi) = guess + 1;
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

// ---- placement.cpp: the candidate with layers or experts in RAM so that it fits at ctx (nullopt: never) ----
std::optional<Candidate> offloaded(const Setup& s, const Candidate& c, int ctx);
// Without the search: a lower bound on the shortfall of the main weights alone (weights_alone_headroom's negative) of
// whatever placement offloaded returns for c, on one GPU and host RAM (nullopt: none known). Above 0 the placement's
// weights alone overflow a pool, so its option is read only when nothing fits (Sized::defer). It reads c's weights
// only (not its cache types).
std::optional<Bytes> offloaded_shortfall_bound(const Setup& s, const Candidate& c);

// ---- suggest.cpp: verified alternatives ----
std::vector<Suggestion> suggestions_for(const Setup& s, const Plan& plan);
// plan() with the compute figures of an outer plan() call (its suggestions' re-plans). recommendation_only: the
// caller reads only the recommendation (the other options and the explanation are left out, and when nothing fits,
// what is missing).
Plan plan_sharing(const Catalog& catalog, const Request& request, const std::shared_ptr<ComputeMemo>& memo, bool recommendation_only);

// ---- speed.cpp: decode and prefill estimates ----
// From the option's allocations, or from inputs summed without them (ranked_account).
void estimate_speed(const Setup& s, const Candidate& c, Option& o);
void estimate_speed(const Setup& s, const Candidate& c, Option& o, const SpeedInputs& in);
SpeedInputs speed_inputs(const Setup& s, const Candidate& c, const Option& o);
// A pool's memory bandwidth in GB/s (0: unknown).
double bandwidth_of(const Setup& s, const std::string& pool);
// The fastest decode any fitting option of the candidate's weights could have, on one device and host RAM: what a
// token reads of its main weights as placed now, or (placement_open) with as much of them on the device as its budget
// holds (the placement search not run yet). tps: estimate_decode's rate (HUGE_VAL: no known bandwidth reads any of
// it); relative: its decode_relative; tps_certain: every pool's bandwidth is known, so the option's rate is;
// tps_unknown: a pool without a bandwidth reads some of them, so the option's rate is unknown (0).
struct DecodeBound {
  double tps = 0, relative = 1;
  bool tps_certain = false, tps_unknown = false;
};
DecodeBound decode_bound(const Setup& s, const Candidate& c, bool placement_open);

// ---- score.cpp: the quality prior's view of an option ----
const std::string& prior_name(const Setup& s, const std::string& id, bool k_role);
double k_bits(const Setup& s, const std::string& id);
double v_bits(const Setup& s, const std::string& id);
double k_storage_bits(const Setup& s, const std::string& id);
bool uses_rotation(const Setup& s, const std::string& type_k, const std::string& type_v);
// with_evidence: the sentences the quality rests on (only printed options need them: dress_option).
void score(const Setup& s, const Candidate& c, Option& o, bool with_evidence = false);
// The candidate's quality at a context per slot and bits per weight (score: the option's own).
Quality quality_at(const Setup& s, const Candidate& c, int ctx_per_slot, double bpw, bool with_evidence = false);
// The same in steps: the prior's view of its cache types (worked out once per plan), then the quality in it.
Setup::ScoreCell& score_cell(const Setup& s, const Candidate& c);
Setup::ScoreCell& score_cell(const Setup& s, const std::string& k, const std::string& v);
Quality quality_in(const Setup& s, const Candidate& c, Setup::ScoreCell& cell, int ctx_per_slot, double bpw, bool with_evidence = false);

// ---- rank.cpp: the one-line reason, the order, dominance ----
std::string reason_for(const Setup& s, const Option& o);
double cautious_loss(const Option& o);
double cautious_loss(const Quality& q);
double objective(const Setup& s, const Option& o, bool max_context);
// The objective's speed term: below the task's floor a cost, above it a little gain; speed unknown, what RAM costs.
double speed_term(const Setup& s, double decode_tps, double decode_relative);
// The tiers before the score (docs/ranking.md §5), compared in order: avoid; in max-context mode worse than mild;
// below the task minimum; (K not pinned) keys at the prior's low bits.
using Tier = std::tuple<bool, bool, bool, bool>;
Tier rank_tier(const Setup& s, Risk risk, bool below_task_min, const std::string& k);
Tier rank_tier_bits(const Setup& s, Risk risk, bool below_task_min, double k_bits);  // K's bits (k_bits) given
bool ranks_by_max_context(const Setup& s);
// The objective's context term: what a context short of `target` costs (0 at or beyond it).
double context_term(int ctx_per_slot, int target);
bool ranks_before(const Setup& s, const Option& a, const Option& b);
bool ranks_before(const Setup& s, const Option& a, const Tier& ta, const Option& b, const Tier& tb);  // tiers worked out
// What dominance compares of an option (the context counted up to the target, the cautious loss, headroom, speed,
// risk), worked out once per option: rank_options compares every pair.
struct Standing {
  int ctx = 0;
  double loss = 0;
  Bytes headroom = 0;
  double decode_tps = 0, decode_relative = 0;
  int risk = 0;
};
Standing standing(const Setup& s, const Option& o, bool max_context);
bool dominates(const Standing& b, const Standing& a);
// The options no other dominates, as indices into standings in ascending order.
std::vector<size_t> undominated(const std::vector<Standing>& standings);
// The first `count` of the ranking (indices into fitting, best first): below the task minimum dropped when any
// option reaches it, dominated options dropped, the rest in ranks_before's order. max_context: the mode's.
std::vector<size_t> ranked(const Setup& s, const std::vector<const Option*>& fitting, bool max_context, size_t count);

// ---- bound.cpp: what no sizing of a candidate can beat (sizing best bound first) ----
// Whether bounds hold for this request: llama.cpp's memory model on one device and host RAM, and a prior whose loss
// is least at the shortest context and the most bits.
bool bounds_apply(const Setup& s);
// The best tier, the highest objective and the best standing (risk, cautious loss, speed) any fitting option of the
// candidate at ctx_per_slot or more could have, its decode at most `speed` (decode_bound: its weights as placed, or
// before kvplan's placement search). A tier below the task minimum where most_ctx is below it.
struct RankBound {
  Tier tier;
  double score = 0;
  int risk = 0;
  double loss = 0, decode_tps = 0, decode_relative = 1;
};
// most_ctx: the most tokens per slot it could fit (context_bound).
RankBound rank_bound(const Setup& s, const Candidate& c, int ctx_per_slot, const DecodeBound& speed, double most_ctx = HUGE_VAL);
// The ranking's first options as a bound is compared with them: each one's standing, the last one's tier.
struct ShownOptions {
  ShownOptions() = default;
  ShownOptions(const Setup& s, std::vector<const Option*> first, bool max_context);
  std::vector<const Option*> options;
  std::vector<Standing> standings;
  Tier last_tier;
};
// An option within the bound ranks below the last of `shown` (the ranking's first options, at the task minimum)
// and dominates none of them: were it sized, they would still be shown, in the same order.
bool cannot_show(const RankBound& b, const ShownOptions& shown);

// ---- explain.cpp: why the recommendation, with evidence ----
std::vector<std::string> explain(const Setup& s, const Option& best, const std::vector<const Option*>& all);
std::string loss_pct(double x);

}  // namespace kvplan::detail

// enumerate(): the (weights, K, V, flash attention) candidates the engine accepts (docs/ranking.md §1-2); an
// explicit request the engine will not run is an input error naming what would.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kvplan/error.hpp"
#include "planner/setup.hpp"

namespace kvplan::detail {

void reject_dynamic_quant(const std::string& flag, const std::string& value) {
  throw InputError(flag, value,
                   "is an Unsloth Dynamic quant: its per-tensor mix is custom and is known only from the file's header, so kvplan "
                   "does not guess it; give the GGUF file (--model path/to/file.gguf, or a Hub file) and it is sized exactly, "
                   "or name a llama-quantize type such as Q4_K_M");
}

namespace {

// vLLM/SGLang plan formats a checkpoint exists for (data/engines/checkpoints.yaml): an expert-only format
// (MXFP4) only where the model was released in it, others only pinned with --weights when no repo is known.
void serving_formats(const Setup& s, std::vector<const WeightFormat*>& formats) {
  if (s.runtime->kind != "vllm" && s.runtime->kind != "sglang") return;
  const Request& r = s.request;
  std::vector<const WeightFormat*> kept;
  for (const WeightFormat* f : formats) {
    const bool known = has_checkpoint(s, *f);
    if (f->experts_only && !known) {
      if (r.weights)
        throw InputError("--weights", *r.weights, fmt::format("{} quantizes MoE experts as released; {} has no {} release "
                                                              "(data/engines/checkpoints.yaml)", f->id, s.model->name, f->id));
      continue;
    }
    if (known || r.weights) kept.push_back(f);
  }
  if (!kept.empty()) formats = kept;
}

// The weight formats to plan: the engine's own (sized from the parameter count), a GGUF file's, the one asked
// for, or every offered format with a per-tensor recipe.
std::vector<const WeightFormat*> candidate_formats(const Setup& s) {
  const ModelSpec& m = *s.model;
  const Request& r = s.request;
  const Catalog& catalog = *s.catalog;
  std::vector<const WeightFormat*> formats;
  const bool by_params = m.mla || m.recurrent;  // sized by the format's measured bits per weight
  if (s.own_memory) {
    std::vector<std::string> ids;
    for (const auto& f : s.runtime->weight_formats) {
      ids.push_back(f.id);
      if (!r.weights || f.id == *r.weights) formats.push_back(&f);
    }
    if (formats.empty()) throw InputError("--weights", *r.weights, "is not a weight format of " + s.runtime->name, ids, closest_match(*r.weights, ids));
    serving_formats(s, formats);
  } else if (!m.file_tensors.empty()) {
    const WeightFormat* known = m.file_quant_label.empty() ? catalog.find_weight_format(m.file_format) : nullptr;
    formats.push_back(known ? known : &s.file_format);
  } else if (r.weights) {
    if (r.weights->rfind("UD-", 0) == 0 || r.weights->rfind("ud-", 0) == 0) reject_dynamic_quant("--weights", *r.weights);
    const WeightFormat& f = catalog.weight_format(*r.weights);
    if (!by_params && f.base_type.empty()) throw InputError("--weights", *r.weights, "has no per-tensor recipe in data/weights");
    if (!f.native_only.empty() && f.native_only != m.native_expert_type) {
      std::vector<std::string> released;  // the catalog models whose release precision this is
      for (const auto& other : catalog.models)
        if (other.native_expert_type == f.native_only) released.push_back(other.id);
      throw InputError("--weights", *r.weights,
                       fmt::format("{} was not released in {}; kvplan plans {} only for models that were ({}), where it is the "
                                   "release precision: its loss on a requantized model is not measured",
                                   m.name, f.native_only, f.id, released.empty() ? "none in the catalog" : fmt::format("{}", fmt::join(released, ", "))));
    }
    formats.push_back(&f);
  } else {
    for (const auto& f : catalog.weight_formats)
      if (f.offered && !f.base_type.empty() && (!by_params || f.bpw_llama31_8b > 0) &&
          (f.native_only.empty() || f.native_only == m.native_expert_type))
        formats.push_back(&f);
  }
  return formats;
}

// The K types, V types and flash-attention settings to try, and how they are tied.
struct CacheChoices {
  std::vector<std::string> ks, vs;
  std::vector<bool> fas;
  bool any_attention = false;
  bool tied = false;  // V must equal K: one type for both (engine), or an MLA cache whose V is a view of K
};

CacheChoices cache_choices(const Setup& s) {
  const Request& r = s.request;
  std::vector<std::string> offered = s.engine->cache_types_offered;
  if (s.runtime) {
    offered.clear();
    for (const auto& t : s.runtime->cache_types)
      if (t.offered) offered.push_back(t.id);
  }
  CacheChoices c;
  c.ks = r.cache_type_k ? std::vector<std::string>{*r.cache_type_k} : offered;
  c.vs = r.cache_type_v ? std::vector<std::string>{*r.cache_type_v} : offered;
  c.fas = r.flash_attn == "auto" ? std::vector<bool>{true, false} : std::vector<bool>{r.flash_attn == "on"};
  if (s.own_memory) c.fas = {true};  // the engine's own attention kernels; nothing to choose
  bool any_v = false;
  for (const auto& lc : s.layers_of(*s.model)) {
    c.any_attention |= lc.kind == LayerKind::full || lc.kind == LayerKind::sliding;
    any_v |= lc.v_width > 0;
  }
  if (!c.any_attention) {  // pure recurrent: the cache types act on nothing
    const std::string plain = s.runtime ? s.runtime->cache_types.front().id : "f16";
    c.ks = {r.cache_type_k.value_or(plain)};
    c.vs = {r.cache_type_v.value_or(plain)};
    if (r.flash_attn == "auto") c.fas = {true};
  }
  const bool v_follows_k = c.any_attention && !any_v && !r.cache_type_v;
  c.tied = v_follows_k || (s.runtime && s.runtime->same_type_kv);
  return c;
}

// tk, tv: k's and v's llama.cpp types where the caller found them
engines::PairCheck check_pair(const Setup& s, const std::string& k, const std::string& v, bool fa, bool with_reason = true,
                              const GgmlType* tk = nullptr, const GgmlType* tv = nullptr) {
  if (s.own_memory) return check_runtime_pair(s, k, v);
  if (!tk || !tv) return engines::check_pair(*s.engine, *s.backend, *s.model, s.request.build, k, v, fa, with_reason);
  return engines::check_pair(*s.engine, *s.backend, *s.model, s.request.build, {k, *tk}, {v, *tv}, fa, with_reason);
}

// A pair the main model accepts must also run for the draft model, which shares the flash-attention setting.
engines::PairCheck check_candidate(const Setup& s, const CacheChoices& choices, const std::string& k, const std::string& v, bool fa,
                                   bool with_reason = true, const GgmlType* tk = nullptr, const GgmlType* tv = nullptr) {
  engines::PairCheck check = check_pair(s, k, v, fa, with_reason, tk, tv);
  if (!choices.any_attention && !check.ok && check.slow) check = engines::PairCheck{true, false, {}, {}};  // no attention kernel runs
  if (check.ok && s.draft) {
    engines::PairCheck d =
        engines::check_pair(*s.engine, *s.backend, *s.draft->model, s.request.build, s.draft->type_k, s.draft->type_v, fa, with_reason);
    if (!d.ok) {
      if (with_reason) d.reason = "the draft model: " + d.reason;
      check = d;
    }
  }
  return check;
}

// An explicit request the engine will not run: exit 2 with the reason, what would help, and the pairs that run
// with the same flash-attention setting.
[[noreturn]] void refuse(const Setup& s, const CacheChoices& choices, const engines::PairCheck& first) {
  const Request& r = s.request;
  const bool same_type = s.runtime && s.runtime->same_type_kv;
  std::vector<std::string> alternatives;
  const std::vector<std::string> types = cache_type_ids(s);
  for (const auto& k : types)
    for (const auto& v : types)
      if ((!same_type || k == v) && std::any_of(choices.fas.begin(), choices.fas.end(), [&](bool fa) { return check_pair(s, k, v, fa).ok; }))
        alternatives.push_back(k + "/" + v);
  std::vector<std::string> help;
  if (!first.needs.empty()) help.push_back("use --build fa-all-quants if your build has GGML_CUDA_FA_ALL_QUANTS");
  if (!first.slow && r.flash_attn == "off") help.push_back("use --flash-attn on");
  if (first.slow) help.push_back("use --allow-slow to plan it off the fast path");
  std::string advice;
  for (const auto& h : help) advice += (advice.empty() ? "; " : ", or ") + h;
  const std::string asked = r.cache_type_k.value_or("*") + "/" + r.cache_type_v.value_or("*");
  throw InputError("--cache-type-k/--cache-type-v", asked,
                   s.own_memory ? fmt::format("{} will not run this: {}", s.runtime->name, first.reason)
                                : fmt::format("{} ({} backend, {} build) will not run this: {}{}", s.resolved.engine, s.backend->name,
                                              r.build, first.reason, advice),
                   alternatives);
}

}  // namespace

std::shared_ptr<const WeightBytes> candidate_weight_bytes(const Setup& s, const WeightFormat& f, const Placement& placement) {
  auto shared = [](WeightBytes&& w) { return std::make_shared<const WeightBytes>(std::move(w)); };
  if (s.own_memory)
    return shared(engines::runtime_weight_bytes(*s.model, f, s.engine->weights_rel_error_fallback, s.resolved.tensor_parallel));
  if (!placement.overrides.empty() || sized_from_params(*s.model)) return shared(weight_bytes(*s.model, f, *s.engine, *s.backend, placement));
  const SizedWeights& sized = s.sized(f);
  if (!placement.split_points.empty()) return shared(placed_weights(sized, *s.model, *s.engine, *s.backend, placement));
  const Setup::WeightsKey key{&f, placement.first_gpu_layer, placement.cpu_moe_layers, placement.output_on_gpu};
  auto it = s.weights_memo.find(key);
  if (it == s.weights_memo.end()) {
    const SizedLayers* layers = placement.host_matmuls() ? s.layer_sums(f) : nullptr;
    it = s.weights_memo.emplace(key, shared(placed_weights(sized, *s.model, *s.engine, *s.backend, placement, layers))).first;
  }
  return it->second;
}

double least_weight_bytes(const Catalog& c, const ModelSpec& m) {
  const EngineSpec& e = c.engine("llama.cpp");
  double bits = 16;
  for (const auto& f : c.weight_formats)
    if (f.offered && !f.base_type.empty() && (f.native_only.empty() || f.native_only == m.native_expert_type)) {
      const GgmlType& t = e.type(f.base_type, "formats." + f.id + ".base");
      bits = std::min(bits, 8.0 * t.bytes / t.block);
    }
  return static_cast<double>(m.params) * bits / 8;
}

Bytes room_for_weights(const Setup& s) {
  if (s.own_memory) return 0;
  Bytes room = 0;
  for (const auto& p : s.pools) {
    if (!p.bounded()) return 0;
    room += p.capacity;
  }
  return room;
}

bool weights_exceed_room(const Catalog& c, const ModelSpec& m, Bytes room) {
  return room > 0 && least_weight_bytes(c, m) > static_cast<double>(room);
}

std::vector<Candidate> enumerate(const Setup& s, bool with_weights) {
  const std::vector<const WeightFormat*> formats = candidate_formats(s);
  const CacheChoices choices = cache_choices(s);
  // Whether the engine runs a (K, V, flash attention) setting does not depend on the weights: checked once, and
  // llama.cpp's types found once by name (another engine's cache types are not ggml types: nullptr). The reasons'
  // words are written only for the settings that read them: slow ones planned anyway, and a refusal of them all.
  struct Setting {
    const std::string& k;
    const std::string& v;
    bool fa;
    engines::PairCheck check;
    const GgmlType* type_k;
    const GgmlType* type_v;
    Setup::ScoreCell* cell = nullptr;  // the quality prior's cell of a planned setting
  };
  auto ggml = [&](const std::vector<std::string>& ids, const char* flag) {
    std::vector<const GgmlType*> out;
    for (const auto& id : ids) out.push_back(s.own_memory ? nullptr : &s.engine->type(id, flag));
    return out;
  };
  const std::vector<const GgmlType*> types_k = ggml(choices.ks, "--cache-type-k"), types_v = ggml(choices.vs, "--cache-type-v");
  std::vector<Setting> settings;
  for (size_t i = 0; i < choices.ks.size(); ++i)
    for (size_t j = 0; j < choices.vs.size(); ++j)
      for (bool fa : choices.fas) {
        const std::string &k = choices.ks[i], &v = choices.vs[j];
        if (!choices.tied || v == k)
          settings.push_back(Setting{k, v, fa, check_candidate(s, choices, k, v, fa, false, types_k[i], types_v[j]), types_k[i], types_v[j]});
      }
  auto planned = [&](const Setting& x) { return x.check.ok || (x.check.slow && s.request.allow_slow); };
  for (Setting& x : settings) {
    if (!planned(x)) continue;
    if (!x.check.ok) x.check = check_candidate(s, choices, x.k, x.v, x.fa, true, x.type_k, x.type_v);  // its reason is shown
    x.cell = &score_cell(s, x.k, x.v);
  }
  std::vector<Candidate> candidates;
  candidates.reserve(formats.size() * settings.size());
  for (const auto* f : formats) {
    const auto wb = with_weights ? candidate_weight_bytes(s, *f, s.placement) : nullptr;
    for (const Setting& x : settings)
      if (planned(x))
        candidates.push_back(Candidate{f, x.k, x.v, x.fa, x.check.slow, x.check.needs, x.check.slow ? x.check.reason : "", wb,
                                       s.placement, false, x.type_k, x.type_v, x.cell});
  }
  if (candidates.empty()) {
    const auto refused = std::find_if_not(settings.begin(), settings.end(), planned);
    if (refused == settings.end()) throw std::logic_error("enumerate: no weight format to plan");
    refuse(s, choices, check_candidate(s, choices, refused->k, refused->v, refused->fa));
  }
  return candidates;
}

std::vector<size_t> settings_major(const std::vector<Candidate>& cs) {
  std::vector<size_t> order(cs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(cs[a].k, cs[a].v, cs[a].flash_attn) < std::tie(cs[b].k, cs[b].v, cs[b].flash_attn);
  });
  return order;
}

}  // namespace kvplan::detail

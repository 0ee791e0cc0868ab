// kvplan's own placement when the model does not fit the GPU (docs/ranking.md §4): MoE experts in RAM first
// (--n-cpu-moe N, what llama-server's fit reaches for), layers otherwise (-ngl N); Ollama only layers (num_gpu).
#include <algorithm>
#include <optional>

#include "kvplan/checked.hpp"

#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

// The candidate with a placement of kvplan's: the n layers' experts (experts) or -ngl n. The search probes many
// placements of one candidate, so it sets them on one copy (a Candidate's copy is strings and lists).
class Placer {
 public:
  Placer(const Setup& s, const Candidate& c) : s_(s), x_(c), counts_output_(s.engine->rule_holds("ngl_counts_output")) {
    x_.placed_by_kvplan = true;
  }
  const Candidate& at(bool experts, int n) {
    x_.placement = experts ? Placement::for_request(*s_.model, std::nullopt, n, counts_output_)
                           : Placement::for_request(*s_.model, n, std::nullopt, counts_output_);
    x_.weight_bytes = candidate_weight_bytes(s_, *x_.weights, x_.placement);
    return x_;
  }

 private:
  const Setup& s_;
  Candidate x_;
  bool counts_output_;
};

// kvplan's placement moves MoE experts (--n-cpu-moe), else layers (-ngl): Ollama cannot pass --n-cpu-moe.
bool places_experts(const Setup& s) { return s.model->moe && !(s.runtime && s.runtime->kind == "ollama"); }

}  // namespace

std::optional<Bytes> offloaded_shortfall_bound(const Setup& s, const Candidate& c) {
  const ModelSpec& m = *s.model;
  // one GPU and host RAM, both bounded
  if (s.own_memory || s.gpu_pools.size() > 1 || s.pools.size() != 2 || s.device_pool == s.host_pool ||
      !s.placement.overrides.empty() || !s.placement.split_points.empty())
    return std::nullopt;
  const Pool &device = s.pools[s.pool_index(s.device_pool)], &host = s.pools[s.pool_index(s.host_pool)];
  if (!device.bounded() || !host.bounded()) return std::nullopt;
  // The weights' two figures add up alike at every placement, each upper bound rounded on its own (a few bytes of
  // slack), but for a tied output matrix, allocated or not by where it lands: at most vocab x embd f32 values (the
  // widest weight type) and a MiB for its padding (a backend pads a tensor by a row at most: ggml-cuda's
  // get_alloc_size adds MATRIX_ROW_PADDING, 512 elements).
  constexpr Bytes kRounding = 16;
  const double error = 1 + std::max(s.engine->weights_rel_error, s.engine->weights_rel_error_fallback);
  const Bytes tied_copy = m.tied_embeddings ? checked_bytes((4.0 * m.vocab * m.embd + (1 << 20)) * error, "tied output") : 0;
  const Bytes weights = checked_add(c.weight_bytes->device.high, c.weight_bytes->host.high, "weights") - kRounding - tied_copy;
  Placer placer(s, c);
  // Where the weights alone overflow the GPU with the least of them there (every layer's experts in RAM, or -ngl 0),
  // no placement fits it: the search returns that one (experts) or none (layers).
  const Candidate& least = places_experts(s) ? placer.at(true, m.layers) : placer.at(false, 0);
  if (least.weight_bytes->device.high > device.budget()) return -weights_alone_headroom(s, least);
  // Where the GPU fits, its weights take at most its budget and RAM holds the rest.
  Bytes bound = weights - device.budget() - host.budget();
  // The placements offloaded returns without asking that the GPU fit there: all experts in RAM (the GPU holds no
  // fewer), one layer's experts (where none in RAM fit), every layer on the GPU but the output (where all fit).
  const std::vector<std::pair<bool, int>> unchecked =
      places_experts(s) ? std::vector<std::pair<bool, int>>{{true, m.layers}, {true, 1}} : std::vector<std::pair<bool, int>>{{false, m.layers}};
  for (const auto& [experts, n] : unchecked) bound = std::min(bound, -weights_alone_headroom(s, placer.at(experts, n)));
  return bound;
}

std::optional<Candidate> offloaded(const Setup& s, const Candidate& c, int ctx) {
  const ModelSpec& m = *s.model;
  const bool experts = places_experts(s);
  // The search asks the GPU only: more in RAM never needs more GPU memory, but it needs more RAM, so the placement
  // with the least in RAM that the GPU holds is also the one most likely to fit RAM (which the caller checks).
  // Asking both made it monotonic in neither: Qwen3-30B-A3B Q6_K on 24 GB with 22 GiB of RAM failed because all
  // experts in RAM overflow RAM, though 9 layers' experts (4.4 GiB) fit both.
  // The GPU's need grows about linearly with what it holds, so the search is last_fitting's linear guess.
  Placer placer(s, c);
  auto placed = [&](bool by_experts, int n) { return placer.at(by_experts, n); };  // a copy to keep
  auto headroom = [&](int n) { return devices_headroom(s, placer.at(experts, n), ctx); };
  const int layers = m.layers;
  if (experts) {
    // the fewest layers whose experts go to RAM: the most, k, whose experts stay on the GPU
    const Bytes all_in_ram = headroom(layers);
    if (all_in_ram < 0) return placed(true, layers);  // all of them; the context search shortens the rest
    const Bytes none_in_ram = headroom(0);  // the caller found the full offload short; at least one layer's experts move
    if (none_in_ram >= 0) return placed(true, 1);
    const int kept = last_fitting(0, all_in_ram, layers, none_in_ram, [&](int k) { return headroom(layers - k); });
    return placed(true, layers - kept);
  }
  // the most layers on the GPU (-ngl counts the output layer first at b10454: layers + 1 is everything). The search
  // starts at -ngl 1: every placement from 1 to `layers` keeps the output layer on the GPU and shares one compute
  // graph per format (layers are alike), where -ngl 0 puts the output matrix in RAM (its copy in the GPU's compute
  // buffer: a graph of its own, and not always less GPU memory than -ngl 1).
  const Bytes output_only = headroom(1);
  if (output_only < 0) return headroom(0) >= 0 ? std::optional<Candidate>(placed(false, 0)) : std::nullopt;
  const Bytes everything = headroom(layers + 1);  // the caller found it short; were it not, the most is `layers`
  if (everything >= 0) return placed(false, layers);
  return placed(false, last_fitting(1, output_only, layers + 1, everything, headroom));
}

}  // namespace kvplan::detail

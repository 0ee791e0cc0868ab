// kvplan's own placement when the model does not fit the GPU (docs/ranking.md §4): MoE experts in RAM first
// (--n-cpu-moe N, what llama-server's fit reaches for), layers otherwise (-ngl N); Ollama only layers (num_gpu).
#include <optional>

#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

Candidate placed(const Setup& s, const Candidate& c, bool experts, int n) {
  Candidate x = c;
  const bool counts_output = s.engine->rule_holds("ngl_counts_output");
  x.placement = experts ? Placement::for_request(*s.model, std::nullopt, n, counts_output)
                        : Placement::for_request(*s.model, n, std::nullopt, counts_output);
  x.weight_bytes = candidate_weight_bytes(s, *c.weights, x.placement);
  x.placed_by_kvplan = true;
  return x;
}

}  // namespace

std::optional<Candidate> offloaded(const Setup& s, const Candidate& c, int ctx) {
  const ModelSpec& m = *s.model;
  const bool experts = m.moe && !(s.runtime && s.runtime->kind == "ollama");  // Ollama cannot pass --n-cpu-moe
  // The search asks the GPU only: more in RAM never needs more GPU memory, but it needs more RAM, so the placement
  // with the least in RAM that the GPU holds is also the one most likely to fit RAM (which the caller checks).
  // Asking both made it monotonic in neither: Qwen3-30B-A3B Q6_K on 24 GB with 22 GiB of RAM failed because all
  // experts in RAM overflow RAM, though 9 layers' experts (4.4 GiB) fit both.
  auto fits = [&](int n) { return devices_fit(s, placed(s, c, experts, n), ctx); };
  if (experts) {
    // the fewest layers whose experts go to RAM
    if (!fits(m.layers)) return placed(s, c, true, m.layers);  // all of them; the context search shortens the rest
    int lo = 0, hi = m.layers;  // lo does not fit (full offload failed), hi fits
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (fits(mid) ? hi : lo) = mid;
    }
    return placed(s, c, true, hi);
  }
  // the most layers on the GPU (-ngl counts the output layer first at b10454: m.layers + 1 is everything)
  if (!fits(0)) return fits(1) ? std::optional<Candidate>(placed(s, c, false, 1)) : std::nullopt;
  int lo = 0, hi = m.layers + 1;  // lo fits, hi does not
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return placed(s, c, false, lo);
}

}  // namespace kvplan::detail

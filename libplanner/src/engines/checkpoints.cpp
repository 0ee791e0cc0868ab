#include "engines/checkpoints.hpp"

namespace kvplan::engines {

namespace {
const Checkpoint* listed(const Catalog& c, const ModelSpec& m, const std::string& weights) {
  for (const auto& k : c.checkpoints)
    if (k.model == m.id && k.weights == weights) return &k;
  return nullptr;
}
bool released_in_other_format(const Catalog& c, const ModelSpec& m) {
  for (const auto& k : c.checkpoints)
    if (k.model == m.id && k.native && k.weights != "bf16") return true;
  return false;
}
// A model read from a remote repo (owner/name) names its own checkpoint; a catalog model its hf_id.
std::string own_repo(const ModelSpec& m) {
  if (m.remote && m.remote->id.find('/') != std::string::npos && m.remote->id.find(':') == std::string::npos) return m.remote->id;
  return m.hf_id;
}
}  // namespace

CheckpointChoice checkpoint_for(const Catalog& c, const ModelSpec& m, const WeightFormat& f) {
  if (const Checkpoint* k = listed(c, m, f.id)) return {k->repo, false, k->source};
  const std::string bf16 = released_in_other_format(c, m) ? std::string() : own_repo(m);
  if (f.id == "bf16" && !bf16.empty()) return {bf16, false, "the model's own repo (hf_id)"};
  if (f.id == "fp8" && !bf16.empty() && !f.flag.empty())
    return {bf16, true, "the model's BF16 repo, quantized to FP8 at load (" + f.flag + ")"};
  return {};
}

}  // namespace kvplan::engines

// The quality prior's view of an option: cache types in their K/V roles, rotation, weights bits per weight.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner/setup.hpp"
#include "priors/prior.hpp"

namespace kvplan::detail {

// The prior's name for an engine's cache type in the K or V role (llama.cpp names are the prior's own).
const std::string& prior_name(const Setup& s, const std::string& id, bool k_role) {
  if (s.runtime)
    if (const auto* t = s.runtime->cache_type(id)) return k_role ? t->prior_k : t->prior_v;
  return id;
}
// Equivalent bits of a cache type in its role (exl2 Q6: K 8-bit, V 4-bit).
double k_bits(const Setup& s, const std::string& id) { return s.catalog->prior.type(prior_name(s, id, true)).k_bits; }
double v_bits(const Setup& s, const std::string& id) { return s.catalog->prior.type(prior_name(s, id, false)).v_bits; }
// Storage bits of K per element, scales included (for describing it).
double k_storage_bits(const Setup& s, const std::string& id) {
  if (s.runtime)
    if (const auto* t = s.runtime->cache_type(id)) return t->k_bytes * 8;
  return s.catalog->prior.type(id).bits;
}


bool uses_rotation(const Setup& s, const std::string& type_k, const std::string& type_v) {
  if (s.own_memory) return false;  // types that rotate carry it in the prior (rotation: builtin)
  const bool quantized = s.engine->type(type_k, "").quantized() || s.engine->type(type_v, "").quantized();
  return s.rotation_rule && quantized && s.model->head_dim_k % 64 == 0;
}


double weights_bpw(const ModelSpec& m, const WeightBytes& w) {
  return static_cast<double>(w.device.unpadded + w.host.unpadded - (m.tied_embeddings ? w.host.unpadded : 0)) * 8 /
         static_cast<double>(m.params);
}

namespace {
priors::QualityInput quality_input(const Setup& s, const WeightFormat* weights, int ctx_per_slot, double bpw, const Setup::ScoreCell& cell) {
  priors::QualityInput in;
  in.model = s.model;
  in.weights = weights;
  in.weights_bpw = bpw;
  in.type_k = cell.type_k;
  in.type_v = cell.type_v;
  in.k_sensitivity = cell.k;
  in.v_sensitivity = cell.v;
  in.ctx = ctx_per_slot;
  in.rotation = cell.rotation;
  in.task = s.task;
  return in;
}

}  // namespace

// The cell's evidence bounds read the types and the model only: the context and bits passed with them do not matter.
Setup::ScoreCell& score_cell(const Setup& s, const std::string& k, const std::string& v) {
  auto it = s.score_cells.find(Setup::NamePair(k, v));
  if (it != s.score_cells.end()) return it->second;
  Setup::ScoreCell cell;
  cell.type_k = prior_name(s, k, true);
  cell.type_v = prior_name(s, v, false);
  cell.rotation = uses_rotation(s, k, v);
  cell.k = &s.catalog->prior.type(cell.type_k);
  cell.v = &s.catalog->prior.type(cell.type_v);
  it = s.score_cells.emplace(std::make_pair(k, v), std::move(cell)).first;
  // the closest measurement is cited by the printed options only: found when their sentences are written
  it->second.evidence = priors::cell_evidence(s.catalog->prior, quality_input(s, nullptr, 0, 0, it->second), /*with_nearest=*/false);
  return it->second;
}

Setup::ScoreCell& score_cell(const Setup& s, const Candidate& c) { return c.cell ? *c.cell : score_cell(s, c.k, c.v); }

Quality quality_in(const Setup& s, const Candidate& c, Setup::ScoreCell& cell, int ctx_per_slot, double bpw, bool with_evidence) {
  priors::QualityInput in = quality_input(s, c.weights, ctx_per_slot, bpw, cell);
  auto loss = cell.kv_loss_at.find(in.ctx);
  if (loss == cell.kv_loss_at.end()) loss = cell.kv_loss_at.emplace(in.ctx, priors::kv_loss(s.catalog->prior, in)).first;
  in.kv_loss = loss->second;
  return priors::assess(s.catalog->prior, in, &cell.evidence, with_evidence);
}

Quality quality_at(const Setup& s, const Candidate& c, int ctx_per_slot, double bpw, bool with_evidence) {
  return quality_in(s, c, score_cell(s, c), ctx_per_slot, bpw, with_evidence);
}

void score(const Setup& s, const Candidate& c, Option& o, bool with_evidence) {
  o.quality = quality_at(s, c, o.ctx_per_slot, weights_bpw(*s.model, *c.weight_bytes), with_evidence);
}

}  // namespace kvplan::detail

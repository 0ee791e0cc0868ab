// Keeping the prior inside its evidence (docs/priors.md §1.4). A (family, K type and rotation, V type) cell that no
// fitted row measures is extrapolated: its cache loss is bounded by the nearest measured analogs, the rows of the
// same codebook, bit class and rotation on the same family or on a family without a factor of its own, with the
// same family's rows of other codebooks in that bit class; where none exists, the same codebook on any family. Each
// analog's measured / predicted ratio says how far off the prior was on its cell; the estimate here stays the
// prior's (assess() in prior.cpp) and its band spans those ratios, widened by the prior's 80 % interval. A
// defective codebook (turbo4 as measured) is an analog of itself only.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "priors/prior.hpp"

namespace kvplan::priors {
namespace {

// Bit classes of a type in one role, by its Gaussian-equivalent bits (kvplan's grouping, docs/priors.md §1.4):
// 8-bit, 5-6-bit, 4-bit, 3-bit, 2-bit; the bounds sit between the types of prior.yaml (fp8_e5m2 5.2, turbo4 3.91).
int bit_class(double eq_bits) {
  if (eq_bits >= 7.5) return 8;
  if (eq_bits >= 5.1) return 6;
  if (eq_bits >= 3.8) return 4;
  if (eq_bits >= 2.9) return 3;
  return 2;
}

// The same kind of rounding in one role: both unquantized, or the same bit class (and codebook, unless any_codebook).
bool same_kind(const TypeSensitivity& want, const TypeSensitivity& row, bool k_role, bool any_codebook) {
  if (want.quantized() != row.quantized()) return false;
  if (!want.quantized()) return true;
  if ((want.defective || row.defective) && want.type != row.type) return false;
  if (bit_class(k_role ? want.k_bits : want.v_bits) != bit_class(k_role ? row.k_bits : row.v_bits)) return false;
  return any_codebook || want.codebook == row.codebook;
}

struct Cell {
  const PriorParams& p;
  const TypeSensitivity& k;
  const TypeSensitivity& v;
  const std::string& family;
  bool rot_k;
  bool rotation_matters() const { return priors::rotation_matters(k); }
  // the row's type is the cell's: by index where the loader set one (a cell reads every row), else by name
  bool same_type(int index, const std::string& name, const TypeSensitivity& t) const {
    return index >= 0 ? static_cast<size_t>(index) < p.types.size() && &p.types[static_cast<size_t>(index)] == &t : name == t.type;
  }
  bool k_covered_by(const AnalogRow& a) const {
    return same_type(a.k_index, a.k_type, k) && (!rotation_matters() || a.rot_k == rot_k) && a.family == family;
  }
  bool v_covered_by(const AnalogRow& a) const { return same_type(a.v_index, a.v_type, v) && a.family == family; }
  // tier 0: the same codebooks on this family or on one without its own factor; 1: this family, any codebook of
  // the same bit class; 2: the same codebooks on any family (a family with its own factor is a proxy of last resort)
  // ak, av: the row's K and V types (PriorParams::type_at), looked up once per row
  bool analog(const AnalogRow& a, const TypeSensitivity* ak, const TypeSensitivity* av, int tier) const {
    if (!ak || !av || a.loss < 0) return false;
    if (rotation_matters() && a.rot_k != rot_k) return false;
    const bool any_codebook = tier == 1;
    if (!same_kind(k, *ak, true, any_codebook) || !same_kind(v, *av, false, any_codebook)) return false;
    if (tier == 0) return a.family == family || !a.own_factor;
    if (tier == 1) return a.family == family;
    return true;
  }
};

}  // namespace

EvidenceBounds evidence_bounds(const PriorParams& p, const QualityInput& in, bool rot_k) {
  const TypeSensitivity& k = p.type(in.type_k);
  const TypeSensitivity& v = p.type(in.type_v);
  EvidenceBounds out;
  if (!k.quantized() && !v.quantized()) return out;
  const Cell cell{p, k, v, in.model->family, rot_k};
  bool k_covered = !k.quantized(), v_covered = !v.quantized();
  for (const auto& a : p.analogs) {
    if (k_covered && v_covered) break;
    k_covered = k_covered || cell.k_covered_by(a);
    v_covered = v_covered || cell.v_covered_by(a);
  }
  if (k_covered && v_covered) return out;
  out.extrapolated = true;

  // Each analog says how far off the prior was on its own cell (measured / predicted there).
  std::vector<std::pair<const TypeSensitivity*, const TypeSensitivity*>> types;
  types.reserve(p.analogs.size());
  // by the indices index_types() set when the prior was built (the last step of loading it; the names are checked
  // there), not by name: a cell reads every row
  auto type_of = [&](int index, const std::string& name) {
    return index >= 0 && static_cast<size_t>(index) < p.types.size() ? &p.types[static_cast<size_t>(index)] : p.type_at(index, name);
  };
  for (const auto& a : p.analogs) types.emplace_back(type_of(a.k_index, a.k_type), type_of(a.v_index, a.v_type));
  double lo = INFINITY, hi = 0;
  for (int pass = 0; pass < 2 && out.analogs.empty(); ++pass) {
    for (size_t i = 0; i < p.analogs.size(); ++i) {
      const AnalogRow& a = p.analogs[i];
      const auto [ak, av] = types[i];
      if (a.predicted <= 0) continue;
      if (!(pass == 0 ? cell.analog(a, ak, av, 0) || cell.analog(a, ak, av, 1) : cell.analog(a, ak, av, 2))) continue;
      const double ratio = a.loss / a.predicted;
      hi = std::max(hi, ratio);
      if (!a.upper) lo = std::min(lo, ratio);
      out.analogs.push_back(&a);
    }
  }
  out.lo = std::isfinite(lo) ? std::min(lo, hi) : 0;
  out.hi = hi;
  return out;
}

}  // namespace kvplan::priors

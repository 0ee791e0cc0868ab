// Keeping the prior inside its evidence (docs/priors.md §1.4). A (family, K type and rotation, V type) cell that no
// fitted row measures is extrapolated: its cache loss is bounded by the nearest measured analogs, the rows of the
// same codebook, bit class and rotation on the same family or on a family without a factor of its own, with the
// same family's rows of other codebooks in that bit class; where none exists, the same codebook on any family. Each
// analog's measured / predicted ratio says how far off the prior was on its cell; the estimate here stays the
// prior's (assess() in prior.cpp) and its band spans those ratios, widened by the prior's 80 % interval. A
// defective codebook (turbo4 as measured) is an analog of itself only.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
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

// A row can bound a cell: both its types known, a measured loss and a prediction.
bool bounds_a_cell(const AnalogRow& a) { return a.k_index >= 0 && a.v_index >= 0 && a.loss >= 0 && a.predicted > 0; }

// Two ascending lists of row indices as one, each index once.
std::vector<int> merged(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  out.reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

PriorParams::AnalogIndex index_analogs(const PriorParams& p) {
  PriorParams::AnalogIndex x;
  x.of_family.assign(p.analog_families.size(), {});
  x.bounding_of_family.assign(p.analog_families.size(), {});
  for (size_t i = 0; i < p.analogs.size(); ++i) {
    const AnalogRow& a = p.analogs[i];
    const int row = static_cast<int>(i);
    const auto family = static_cast<size_t>(a.family_index);
    x.of_family.at(family).push_back(row);
    if (!bounds_a_cell(a)) continue;
    x.bounding.push_back(row);
    x.bounding_of_family[family].push_back(row);
    if (!a.own_factor) x.bounding_without_factor.push_back(row);
  }
  x.n_types = p.types.size();
  x.kinds.resize(x.n_types * x.n_types);
  for (size_t i = 0; i < x.n_types; ++i)
    for (size_t j = 0; j < x.n_types; ++j) {
      const TypeSensitivity &want = p.types[i], &t = p.types[j];
      x.kinds[i * x.n_types + j] = static_cast<unsigned char>(same_kind(want, t, true, false) | same_kind(want, t, false, false) << 1 |
                                                               same_kind(want, t, true, true) << 2 | same_kind(want, t, false, true) << 3);
    }
  return x;
}

EvidenceBounds evidence_bounds(const PriorParams& p, const QualityInput& in, bool rot_k) {
  const TypeSensitivity& k = p.type(in.type_k);
  const TypeSensitivity& v = p.type(in.type_v);
  EvidenceBounds out;
  if (!k.quantized() && !v.quantized()) return out;
  // the rows as index_types() keyed them (the last step of loading the prior): no names compared
  if (p.analog_index.of_family.size() != p.analog_families.size() || p.analog_index.n_types != p.types.size() ||
      (!p.analogs.empty() && p.analog_families.empty())) throw std::logic_error("evidence_bounds: the prior's rows are not indexed (index_types)");
  const int k_index = static_cast<int>(&k - p.types.data()), v_index = static_cast<int>(&v - p.types.data());
  const auto fam = std::find(p.analog_families.begin(), p.analog_families.end(), in.model->family);
  const int family = fam == p.analog_families.end() ? -1 : static_cast<int>(fam - p.analog_families.begin());
  const bool rotation = rotation_matters(k);  // the row's K rotation must be the cell's
  bool k_covered = !k.quantized(), v_covered = !v.quantized();
  const PriorParams::AnalogIndex& index = p.analog_index;
  static const std::vector<int> kNone;
  const std::vector<int>& own_rows = family < 0 ? kNone : index.of_family.at(static_cast<size_t>(family));
  for (size_t n = 0; n < own_rows.size() && !(k_covered && v_covered); ++n) {
    const AnalogRow& a = p.analogs[static_cast<size_t>(own_rows[n])];
    k_covered = k_covered || (a.k_index == k_index && (!rotation || a.rot_k == rot_k));
    v_covered = v_covered || a.v_index == v_index;
  }
  if (k_covered && v_covered) return out;
  out.extrapolated = true;

  // Each analog says how far off the prior was on its own cell (measured / predicted there). Tier 0: the same
  // codebooks on this family or on one without its own factor; 1: this family, any codebook of the same bit class;
  // 2 (when neither finds one): the same codebooks on any family (a family with its own factor is a proxy of last resort).
  double lo = INFINITY, hi = 0;
  // tier 0 reads this family's rows and those of families without a factor (in row order), tier 2 every row: of
  // those that can bound a cell
  const std::vector<int> near = merged(family < 0 ? kNone : index.bounding_of_family.at(static_cast<size_t>(family)),
                                       index.bounding_without_factor);
  for (int pass = 0; pass < 2 && out.analogs.empty(); ++pass) {
    const std::vector<int>& rows = pass == 0 ? near : index.bounding;
    for (int row : rows) {
      const AnalogRow& a = p.analogs[static_cast<size_t>(row)];
      if (rotation && a.rot_k != rot_k) continue;
      const unsigned char row_k = index.same_kind_bits(k_index, a.k_index), row_v = index.same_kind_bits(v_index, a.v_index);
      const bool same_codebooks = (row_k & 1) && (row_v & 2), same_bits = (row_k & 4) && (row_v & 8);
      const bool same_family = a.family_index == family;
      if (!(pass == 0 ? (same_codebooks && (same_family || !a.own_factor)) || (same_bits && same_family) : same_codebooks)) continue;
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

#include "kvplan/error.hpp"

#include <algorithm>

#include "catalog/names.hpp"

namespace kvplan {
namespace {

std::string compose(const std::string& field, const std::string& value, const std::string& problem,
                    const std::vector<std::string>& accepted, const std::string& suggestion) {
  // a hostile value may be huge: show its start and its length
  const std::string shown = value.size() > 200 ? value.substr(0, 120) + "… (" + std::to_string(value.size()) + " characters)" : value;
  std::string msg = value.empty() ? field + ": " + problem : field + " '" + shown + "': " + problem;
  if (!suggestion.empty()) msg += "; did you mean '" + suggestion + "'?";
  if (!accepted.empty()) {
    msg += " (accepted: ";
    const size_t shown = std::min<size_t>(accepted.size(), 12);
    for (size_t i = 0; i < shown; ++i) msg += (i ? ", " : "") + accepted[i];
    if (accepted.size() > shown) msg += ", … " + std::to_string(accepted.size() - shown) + " more";
    msg += ")";
  }
  return msg;
}

using detail::fold;  // closest_match compares names as the catalog finds them

}  // namespace

// Optimal string alignment distance: a swapped pair of characters ("4900" for "4090") costs one.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

InputError::InputError(std::string field, std::string value, std::string problem, std::vector<std::string> accepted,
                       std::string suggestion)
    : std::runtime_error(compose(field, value, problem, accepted, suggestion)),
      field_(std::move(field)),
      value_(std::move(value)),
      problem_(std::move(problem)),
      accepted_(std::move(accepted)),
      suggestion_(std::move(suggestion)) {}

std::string closest_match(const std::string& wanted, const std::vector<std::string>& candidates) {
  // No name is hundreds of characters long: a longer input is no typo, and the edit distance is quadratic.
  if (wanted.size() > 256) return {};
  const std::string w = fold(wanted);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const std::string f = fold(c);
    size_t d = edit_distance(w, f);
    // a candidate that contains what was typed (or the reverse) is a strong hint
    if (!w.empty() && (f.find(w) != std::string::npos || w.find(f) != std::string::npos)) d = std::min(d, size_t{1});
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(1, w.size() / 3);  // short names: only one edit away
  return best_d <= limit ? best : std::string{};
}

}  // namespace kvplan

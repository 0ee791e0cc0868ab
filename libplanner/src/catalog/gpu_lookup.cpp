// GPU names as users type them: ids and aliases, the driver's name with its vendor words, bare model numbers
// ("4090"), and a "did you mean" that keeps to the card's number, laptop/desktop kind and memory size.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "kvplan/catalog.hpp"
#include "kvplan/error.hpp"
#include "catalog/names.hpp"

namespace kvplan {

// The macOS default working set as a fraction of RAM, per band of RAM size (lower bound in GiB). Each band is a
// measurement on macOS 15/26 (llama.cpp --list-devices 'MTL0: Apple ... (N MiB'; sources in data/gpus.yaml):
// 8 GiB -> 5461 MiB (M1, M2), 16 -> 12124 (M3, M4), 24 -> 18186 (M2, M4 Pro), 32 -> 25559 (M1 Max),
// 48 -> 38338 (M4 Pro), 64 -> 53084 (M3/M4 Max), 128 -> 110100 (M3/M4/M5 Max), 256 -> 228065 (M3 Ultra).
std::int64_t metal_default_working_set_mib(std::int64_t ram_mib) {
  struct Band {
    std::int64_t from_gib, num, den;
  };
  static constexpr Band bands[] = {{256, 87, 100}, {128, 84, 100}, {64, 81, 100}, {32, 78, 100}, {16, 74, 100}, {0, 2, 3}};
  for (const Band& b : bands)
    if (ram_mib >= b.from_gib * 1024) return ram_mib / b.den * b.num + ram_mib % b.den * b.num / b.den;
  return 0;
}

namespace {

using detail::fold;
using detail::folds_to;

// Lower-case alphanumeric runs, split where letters meet digits: "RTX4060-Laptop" -> rtx 4060 laptop.
std::vector<std::string> tokens(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool digit = std::isdigit(c) != 0;
    if (!std::isalnum(c) || (!cur.empty() && digit != (std::isdigit(static_cast<unsigned char>(cur.back())) != 0))) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    }
    if (std::isalnum(c)) cur += static_cast<char>(std::tolower(c));
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool is_number(const std::string& t) { return !t.empty() && std::isdigit(static_cast<unsigned char>(t[0])); }
bool is_size_unit(const std::string& t) { return t == "gb" || t == "g" || t == "gib" || t == "tb"; }

// Words drivers and shops add to a card's name ("Intel(R) Arc(TM)" gives "r" and "tm").
bool vendor_word(const std::string& t) {
  static const std::set<std::string> words = {"nvidia", "geforce", "amd", "radeon", "intel", "apple", "gpu", "graphics",
                                              "tm", "r", "rtx", "gtx", "rx", "arc"};
  return words.count(t) > 0;
}

// The name without vendor words: "NVIDIA GeForce RTX 4060 Laptop GPU" -> "4060 laptop".
std::string canonical(const std::string& s) {
  std::string out;
  for (std::string t : tokens(s)) {
    if (vendor_word(t)) continue;
    if (t == "mobile" || t == "notebook") t = "laptop";
    if (!out.empty()) out += ' ';
    out += t;
  }
  return out;
}

struct Traits {  // what a GPU name says about the card
  std::string number;              // model number: "4060", "7900", "m2" (Apple chip)
  bool laptop = false;
  std::set<std::string> variants;  // ti, super, xt, xtx, gre, pro, max, ultra
  long size_gb = 0;                // 0: not stated
  bool unknown_words = false;      // a word none of the above (a typo, "pcie"): the name is not just a model
};

Traits traits_of(const std::string& name) {
  static const std::set<std::string> variant_words = {"ti", "super", "xt", "xtx", "gre", "pro", "max", "ultra"};
  const auto t = tokens(name);
  Traits r;
  for (size_t i = 0; i < t.size(); ++i) {
    const bool sized = i + 1 < t.size() && is_size_unit(t[i + 1]);
    const bool prefix = i + 1 < t.size() && t[i].size() == 1 && !is_number(t[i]) && is_number(t[i + 1]);  // "a" of a770
    if (is_number(t[i]) && sized && r.size_gb == 0) r.size_gb = std::atol(t[i].c_str()) * (t[i + 1] == "tb" ? 1024 : 1);
    else if (is_number(t[i]) && !sized && t[i].size() >= 3 && r.number.empty())
      r.number = (i > 0 && t[i - 1].size() == 1 && !is_number(t[i - 1]) ? t[i - 1] : "") + t[i];  // "a770", "h100"
    else if (t[i] == "m" && i + 1 < t.size() && t[i + 1].size() == 1 && is_number(t[i + 1]) && r.number.empty()) r.number = "m" + t[i + 1];
    else if (t[i] == "laptop" || t[i] == "mobile" || t[i] == "notebook") r.laptop = true;
    else if (variant_words.count(t[i])) r.variants.insert(t[i]);
    else if (t[i].rfind("lap", 0) == 0) r.laptop = r.unknown_words = true;  // "laptp": a laptop, but a typo
    else if (!(prefix || is_size_unit(t[i]) || vendor_word(t[i]) || (is_number(t[i]) && r.number.size() == 2))) r.unknown_words = true;
  }
  return r;
}

Traits traits_of(const GpuSpec& g) {
  Traits r = traits_of(g.id);
  r.size_gb = std::lround(static_cast<double>(g.total_mib) / 1024);
  return r;
}

// Higher is closer: the same model number first (or one typo away), then laptop or desktop, variant words, then size.
long similarity(const Traits& want, const Traits& have) {
  long score = 0;
  if (!want.number.empty() && want.number == have.number) score += 1000;
  else if (!want.number.empty() && !have.number.empty()) score += std::max(0L, 1000 - 300 * static_cast<long>(edit_distance(want.number, have.number)));
  if (want.laptop == have.laptop) score += 300;
  for (const auto& v : want.variants) score += have.variants.count(v) ? 100 : -100;
  for (const auto& v : have.variants) score -= want.variants.count(v) ? 0 : 100;
  if (want.size_gb > 0) score -= 10 * std::labs(want.size_gb - have.size_gb);
  return score;
}

// The catalog's GPUs ordered from most to least like `wanted`.
std::vector<const GpuSpec*> by_likeness(const std::vector<GpuSpec>& gpus, const std::string& wanted) {
  const Traits want = traits_of(wanted);
  const std::string key = fold(wanted);
  std::vector<std::pair<std::pair<long, size_t>, const GpuSpec*>> ranked;
  for (const auto& g : gpus) {
    size_t distance = edit_distance(key, fold(g.id));
    for (const auto& a : g.aliases) distance = std::min(distance, edit_distance(key, fold(a)));
    ranked.push_back({{-similarity(want, traits_of(g)), distance}, &g});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const GpuSpec*> out;
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}

// The GPUs whose id or an alias (or, with `display`, whose display name) `matches`.
template <typename Matches>
std::vector<const GpuSpec*> matching(const std::vector<GpuSpec>& gpus, Matches matches, bool display) {
  std::vector<const GpuSpec*> out;
  for (const auto& g : gpus)
    if (display ? matches(g.name) : matches(g.id) || std::any_of(g.aliases.begin(), g.aliases.end(), matches)) out.push_back(&g);
  return out;
}

}  // namespace

std::vector<const GpuSpec*> Catalog::gpu_matches(const std::string& name) const {
  const std::string folded = fold(name);
  if (folded.empty()) return {};
  // Ids and aliases before display names, so an alias settles a driver name two cards share ("3060"); the names'
  // canonical forms (a string built per name) only where no name folds to the one asked for.
  auto exact = [&](const std::string& n) { return folds_to(n, folded); };
  if (auto found = matching(gpus, exact, false); !found.empty()) return found;
  const std::string key = canonical(name);
  auto spelled = [&](const std::string& n) { return canonical(n) == key; };
  if (auto found = matching(gpus, spelled, false); !found.empty()) return found;
  if (auto found = matching(gpus, exact, true); !found.empty()) return found;
  if (auto found = matching(gpus, spelled, true); !found.empty()) return found;
  // A model without its size ("m2 max", "rtx 4060 ti"): every size of that card. A bare number that names no plain
  // card ("7900"): every card that carries it. A lone "4060 Ti" is not what "4060" says, so that is left to the
  // "did you mean".
  const Traits want = traits_of(name);
  if (want.number.empty() || want.size_gb > 0 || want.unknown_words) return {};
  std::vector<const GpuSpec*> same, numbered;
  for (const auto& g : gpus) {
    const Traits have = traits_of(g);
    if (have.number != want.number) continue;
    numbered.push_back(&g);
    if (have.laptop == want.laptop && have.variants == want.variants) same.push_back(&g);
  }
  if (!same.empty()) return same;
  const bool bare = key.find(' ') == std::string::npos;
  return bare && numbered.size() > 1 ? numbered : std::vector<const GpuSpec*>{};
}

const GpuSpec& Catalog::gpu(const std::string& name, const std::string& field) const {
  const auto found = gpu_matches(name);
  if (found.size() == 1) return *found.front();
  std::vector<std::string> ids;
  for (const GpuSpec* g : found) ids.push_back(g->id);
  if (found.size() > 1) throw InputError(field, name, "names several GPUs; give one of these ids", ids);
  const Traits want = traits_of(name);
  std::string suggestion;
  if (want.number.empty() && want.size_gb == 0) {  // nothing to go by but the spelling
    std::vector<std::string> all;
    for (const auto& g : gpus) all.push_back(g.id);
    ids = all;
    for (const auto& g : gpus) all.insert(all.end(), g.aliases.begin(), g.aliases.end());
    if (const std::string near = closest_match(name, all); !near.empty()) suggestion = gpu_matches(near).front()->id;
  } else {  // the closest cards by number, kind and size
    const auto ranked = by_likeness(gpus, name);
    for (size_t i = 0; i < ranked.size() && i < 12; ++i) ids.push_back(ranked[i]->id);
    if (!ranked.empty()) suggestion = ranked.front()->id;
  }
  throw InputError(field, name, "unknown GPU (see `kvplan gpus`, or give a size such as 24GB)", ids, suggestion);
}

}  // namespace kvplan

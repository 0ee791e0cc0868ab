// How the catalog compares the names users type (models, GPUs, engines): folded to lower-case letters, digits and
// dots, so that "Qwen 2.5 Coder 32B" finds qwen2.5-coder-32b and "RTX-4090" finds rtx4090. Data files are checked
// with the same fold (load.cpp check_unique_names), so no two entries share a folded name.
#pragma once
#include <cctype>
#include <string>
#include <string_view>

namespace kvplan::detail {

// ASCII only, whatever the locale (Python sets the user's): a name folds the same in every front end, and a lookup
// compares a key with every name of the catalog without a library call per character.
inline bool kept_in_fold(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'; }
inline char folded_char(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

inline std::string fold(std::string_view s) {
  std::string out;
  for (char c : s)
    if (kept_in_fold(c)) out += folded_char(c);
  return out;
}

// fold(name) == key, without building the folded name: lookups compare a key with every name of the catalog, and
// most names differ from it at their first character.
inline bool folds_to(std::string_view name, std::string_view key) {
  size_t i = 0;
  for (char c : name) {
    if (!kept_in_fold(c)) continue;
    if (i == key.size() || folded_char(c) != key[i]) return false;
    ++i;
  }
  return i == key.size();
}

}  // namespace kvplan::detail

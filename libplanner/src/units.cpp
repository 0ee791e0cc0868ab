#include "kvplan/units.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kvplan/error.hpp"

namespace kvplan {

int parse_token_count(std::string_view text, std::string_view field) {
  const std::string original(text);
  const std::vector<std::string> accepted = {"8192", "32k", "128K", "1M"};
  std::string digits(text);
  double scale = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) scale = 1024, digits.pop_back();
  else if (!digits.empty() && (digits.back() == 'm' || digits.back() == 'M')) scale = 1024.0 * 1024, digits.pop_back();
  const bool plain = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
  double number = 0;
  size_t used = 0;
  try {
    number = plain ? std::stod(digits, &used) : 0;
  } catch (const std::exception&) {
    used = 0;
  }
  const double tokens = number * scale;
  if (!plain || used != digits.size() || tokens < 1 || tokens > 2147483647.0 || tokens != std::floor(tokens))
    throw InputError(std::string(field), original, "not a token count (a whole number of tokens; k = 1024)", accepted);
  return static_cast<int>(tokens);
}

Bytes parse_size(std::string_view text, std::string_view field) {
  const std::string original(text);
  const std::vector<std::string> accepted = {"24GB", "24GiB", "23.5G", "24576MiB", "512MB"};
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == start) throw InputError(std::string(field), original, "not a size", accepted);
  double number = 0;
  try {
    size_t used = 0;
    number = std::stod(std::string(text.substr(start, i - start)), &used);
    if (used != i - start) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw InputError(std::string(field), original, "not a size", accepted);
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) throw InputError(std::string(field), original, "not a size", accepted);
  Bytes scale = 0;
  // Binary on purpose: a card sold as "24GB" has 24 GiB.
  if (unit == "g" || unit == "gb" || unit == "gib") scale = kGiB;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = kMiB;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = kGiB * 1024;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = kKiB;
  else if (unit.empty())
    throw InputError(std::string(field), original, "size needs a unit (GB, GiB, MB, MiB)", accepted);
  else
    throw InputError(std::string(field), original, "unknown size unit", accepted);
  const double bytes = number * static_cast<double>(scale);
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e18)
    throw InputError(std::string(field), original, "size out of range (at least 1 byte, at most 1e18 bytes)", accepted);
  return static_cast<Bytes>(std::llround(bytes));
}

std::string format_gib(Bytes b) { return fmt::format("{:.2f}", static_cast<double>(b) / kGiB); }
std::string format_mib(Bytes b) { return fmt::format("{:.2f}", static_cast<double>(b) / kMiB); }
std::string format_size(Bytes b) {
  return (b >= kGiB || b <= -kGiB) ? format_gib(b) + " GiB" : format_mib(b) + " MiB";
}

}  // namespace kvplan

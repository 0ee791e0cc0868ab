// Reading the text system tools print (/proc/meminfo, nvidia-smi, rocm-smi, sysctl) and the kernel's small files
// (procfs, sysfs, cgroups): one reader, one trim, one count parser.
#pragma once
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace kvplan::cli {

// At most `cap` bytes of a file, read in chunks (procfs files report size 0, and a zeroed buffer of the cap per file
// cost more than the parsing); nullopt when it cannot be opened or read.
inline std::optional<std::string> read_small_file(const std::string& path, std::size_t cap) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string out;
  std::array<char, 8192> chunk{};
  while (out.size() < cap) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    out.append(chunk.data(), std::min(got, cap - out.size()));
    if (got < chunk.size()) break;
  }
  if (in.bad()) return std::nullopt;
  return out;
}

inline std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\r\n";
  const auto first = s.find_first_not_of(ws);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

// A whole number of digits, spaces around allowed: from_chars alone would take a sign, and "12abc" as 12.
inline std::optional<std::int64_t> parse_count(std::string_view s) {
  s = trim(s);
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

}  // namespace kvplan::cli

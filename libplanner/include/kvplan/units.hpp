// kvplan/units.hpp — byte sizes: parsing and the one place they are formatted.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kvplan {

using Bytes = std::int64_t;
inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;

// Parses "24GB", "24GiB", "24 G", "23.5GiB", "24576MiB", "512M". Suffixes are binary: GPU memory
// sold as "24GB" is 24 GiB, and that is what the engines and nvidia-smi report. A bare number is
// rejected (ambiguous). Throws InputError naming `field`.
Bytes parse_size(std::string_view text, std::string_view field);

// Round x up to a multiple of n (ggml GGML_PAD).
constexpr std::int64_t pad_to(std::int64_t x, std::int64_t n) { return (x + n - 1) / n * n; }

std::string format_gib(Bytes b);  // "18.08" (two decimals, no unit)
std::string format_mib(Bytes b);  // "4352.00"
std::string format_size(Bytes b); // "18.08 GiB" or "412.00 MiB", whichever reads better

}  // namespace kvplan

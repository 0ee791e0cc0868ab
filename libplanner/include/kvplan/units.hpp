// kvplan/units.hpp — byte sizes: parsing and the one place they are formatted.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "kvplan/checked.hpp"

namespace kvplan {

using Bytes = std::int64_t;
inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;

// Parses "24GB", "24GiB", "24 G", "23.5GiB", "24576MiB", "512M". Suffixes are binary: GPU memory
// sold as "24GB" is 24 GiB, and that is what the engines and nvidia-smi report. A bare number is
// rejected (ambiguous). Throws InputError naming `field`.
Bytes parse_size(std::string_view text, std::string_view field);

// Parses a context length in tokens: "8192", "32k", "128K", "1M" (k = 1024 tokens, as model cards count "128k"
// for 131072), "1.5k" when it gives a whole number. Returns 1..2^31-1; throws InputError naming `field`.
int parse_token_count(std::string_view text, std::string_view field);

// Round x up to a multiple of n (ggml GGML_PAD); n must be positive (a data file's zero padding or alignment
// is refused where it is read; this is the last guard), and the result must fit 64 bits.
inline std::int64_t pad_to(std::int64_t x, std::int64_t n) {
  if (n <= 0) throw InputError("padding", std::to_string(n), "a padding or alignment must be positive");
  return checked_mul(checked_add(x, n - 1, "padded size") / n, n, "padded size");
}

std::string format_gib(Bytes b);  // "18.08" (two decimals, no unit)
std::string format_mib(Bytes b);  // "4352.00"
std::string format_size(Bytes b); // "18.08 GiB" or "412.00 MiB", whichever reads better

}  // namespace kvplan

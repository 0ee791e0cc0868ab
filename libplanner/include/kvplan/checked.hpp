// kvplan/checked.hpp — overflow-checked size arithmetic. Every byte count kvplan computes from a model's
// dimensions goes through these, so no plan can carry a negative or wrapped size: a product or sum that does
// not fit 64 bits (or a double that is not a finite byte count) is an InputError naming what was being sized.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvplan/error.hpp"

namespace kvplan {

// The error for a size that does not fit: `what` names the model field or buffer being sized.
[[noreturn]] inline void size_overflow(std::string_view what) {
  throw InputError("--model", std::string(what),
                   "sizes overflow 64-bit byte counts (the model's dimensions are impossible); accepted: sizes below 2^63 bytes");
}

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) size_overflow(what);
  return out;
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) size_overflow(what);
  return out;
}

// A double byte count rounded to the nearest byte; non-finite or beyond ±2^62 is an overflow.
inline std::int64_t checked_bytes(double x, std::string_view what) {
  if (!std::isfinite(x) || std::fabs(x) > 4.6e18) size_overflow(what);
  return std::llround(x);
}

}  // namespace kvplan

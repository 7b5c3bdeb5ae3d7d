// Sizes computed from numbers in files (shapes, widths, counts): products and sums that would wrap
// around are reported instead of taken, so that a hostile file cannot turn a huge size into a
// small one that passes the next check.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace rqat::io {

// a * b, or nullopt when it does not fit in int64 (or either is negative).
constexpr std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

constexpr std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of all factors, or nullopt as above.
constexpr std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  std::optional<int64_t> out = 1;
  for (const int64_t f : factors) {
    out = checked_mul(*out, f);
    if (!out) return std::nullopt;
  }
  return out;
}

}  // namespace rqat::io

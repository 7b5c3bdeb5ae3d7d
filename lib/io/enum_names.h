// One name table per user-facing enum, in the manner of ggml's op-name table: the flag, YAML and
// JSON spelling of every enumerator lives in one array next to the enum, and both directions
// (value -> name for manifests and logs, name -> value for flags and files) read it.
//
//   enum class LrDecay { kConstant, kLinear, kCosine, kCount };
//   inline constexpr EnumName<LrDecay> kLrDecayNames[] = {
//       {LrDecay::kConstant, "constant"}, {LrDecay::kLinear, "linear"},
//       {LrDecay::kCosine, "cosine"}};
//   static_assert(enum_table_complete(kLrDecayNames));
//   ... parse_enum(kLrDecayNames, "cosine", "--schedule") == LrDecay::kCosine
//
// kCount (as GGML_OP_COUNT) is a sentinel, never a value: a new enumerator without a name fails
// the static_assert (the count), and so does a table out of enumerator order. Names are string
// literals, so enum_name(...).data() is NUL-terminated.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/error.h"

namespace rqat {

template <class E>
struct EnumName {
  E value;
  std::string_view name;  // a string literal
};

// Entry i names enumerator i, and the names are non-empty and distinct (so parsing is unambiguous).
template <class E, size_t N>
constexpr bool enum_table_in_order(const EnumName<E> (&table)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (static_cast<size_t>(table[i].value) != i || table[i].name.empty()) return false;
    for (size_t j = 0; j < i; ++j)
      if (table[j].name == table[i].name) return false;
  }
  return true;
}

// One entry per enumerator before E::kCount, in order: what every table's static_assert checks.
template <class E, size_t N>
constexpr bool enum_table_complete(const EnumName<E> (&table)[N]) {
  return N == static_cast<size_t>(E::kCount) && enum_table_in_order(table);
}

// The name of `value`. A value outside the table (kCount, or a cast integer) is a programming
// error: it throws std::logic_error, not a user-facing rqat::Error.
template <class E, size_t N>
constexpr std::string_view enum_name(const EnumName<E> (&table)[N], E value) {
  const auto i = static_cast<size_t>(value);
  if (i >= N || table[i].value != value)
    throw std::logic_error(
        fmt::format("enum_name: value {} has no name", static_cast<long long>(i)));
  return table[i].name;
}

// "a", "a or b", "a, b or c": the names in table order, for messages and flag help.
template <class E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// The names in table order (e.g. for CLI::IsMember).
template <class E, size_t N>
std::vector<std::string> enum_name_list(const EnumName<E> (&table)[N]) {
  std::vector<std::string> out;
  out.reserve(N);
  for (const auto& entry : table) out.emplace_back(entry.name);
  return out;
}

// The enumerator named `text` (exact, case-sensitive). Anything else fails with one line naming
// `where` (the flag, or FILE:field), the text and the choices:
//   --scale-mode: unknown value 'x' (expected frozen, lsq or clip)
template <class E, size_t N>
E parse_enum(const EnumName<E> (&table)[N], std::string_view text, std::string_view where) {
  for (const auto& entry : table)
    if (entry.name == text) return entry.value;
  fail("{}: unknown value '{}' (expected {})", where, text, enum_choices(table));
}

}  // namespace rqat

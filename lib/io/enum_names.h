// One name table per user-facing enum, in the manner of ggml's op-name table: the flag, YAML and
// JSON spelling of every enumerator is one array, indexed by the enumerator, declared next to the
// enum by a function that argument-dependent lookup finds:
//
//   enum class LrDecay { kConstant, kLinear, kCosine, kCount };
//   constexpr EnumNames<LrDecay> enum_names(LrDecay) { return {"constant", "linear", "cosine"}; }
//
//   enum_name(LrDecay::kCosine) == "cosine"
//   parse_enum<LrDecay>("cosine", "--schedule") == LrDecay::kCosine
//
// kCount (as GGML_OP_COUNT) is a sentinel, never a value: it sizes the array, so a table with
// more names than enumerators does not compile, and one with fewer (or an empty or repeated name)
// fails the static_assert in every helper below. Names are string literals, so
// enum_name(...).data() is NUL-terminated.
#pragma once

#include <fmt/format.h>

#include <array>
#include <concepts>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/error.h"

namespace rqat {

template <class E>
using EnumNames = std::array<std::string_view, static_cast<size_t>(E::kCount)>;

// An enum with a name table: `enum_names(E)` is declared in E's namespace.
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { enum_names(e) } -> std::same_as<EnumNames<E>>;
};

// Every enumerator has a name, and the names are distinct (so parsing is unambiguous).
template <size_t N>
constexpr bool enum_names_valid(const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i].empty()) return false;
    for (size_t j = 0; j < i; ++j)
      if (names[j] == names[i]) return false;
  }
  return true;
}

// The table of E, checked once per enum where it is first used.
template <NamedEnum E>
inline constexpr EnumNames<E> kEnumNames = enum_names(E{});

template <NamedEnum E>
constexpr const EnumNames<E>& checked_enum_names() {
  static_assert(enum_names_valid(kEnumNames<E>), "an enumerator has no name, or a name repeats");
  return kEnumNames<E>;
}

// The name of `value`. A value outside the table (kCount, or a cast integer) is a programming
// error: it throws std::logic_error, not a user-facing rqat::Error.
template <NamedEnum E>
constexpr std::string_view enum_name(E value) {
  const auto& names = checked_enum_names<E>();
  const auto i = static_cast<size_t>(value);
  if (i >= names.size())
    throw std::logic_error(
        fmt::format("enum_name: value {} has no name", static_cast<long long>(i)));
  return names[i];
}

// "a", "a or b", "a, b or c": the names in enumerator order, for messages and flag help.
template <NamedEnum E>
std::string enum_choices() {
  const auto& names = checked_enum_names<E>();
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

// The names in enumerator order (e.g. for CLI::IsMember).
template <NamedEnum E>
std::vector<std::string> enum_name_list() {
  const auto& names = checked_enum_names<E>();
  return {names.begin(), names.end()};
}

// The enumerator named `text` (exact, case-sensitive). Anything else fails with one line naming
// `where` (the flag, or FILE:field), the text and the choices:
//   --scale-mode: unknown value 'x' (expected frozen, lsq or clip)
template <NamedEnum E>
E parse_enum(std::string_view text, std::string_view where) {
  const auto& names = checked_enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  fail("{}: unknown value '{}' (expected {})", where, text, enum_choices<E>());
}

}  // namespace rqat

// Splits a normalized answer into its structure before values are compared: a scalar, an ordered
// tuple/interval with its bracket kinds, a set \{...\}, a bare comma list, a matrix, a union of
// intervals or sets (\cup), or a "a \pm b" pair.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rqat::eval {

struct Structure {
  enum class Kind { scalar, ordered, set, list, matrix, union_of };
  Kind kind = Kind::scalar;
  char open = 0;                               // ordered: '(' or '['
  char close = 0;                              // ordered: ')' or ']'
  std::vector<std::string> items;              // scalar: one item; ordered, set, list: the elements
  std::vector<std::vector<std::string>> rows;  // matrix
  std::vector<Structure> parts;                // union_of
};

// Structure of a normalized answer (eval/normalize.h).
Structure split_structure(std::string_view answer);

// Splits at `sep` outside (), [], {} and \{ \}.
std::vector<std::string> split_top_level(std::string_view text, std::string_view sep);

}  // namespace rqat::eval

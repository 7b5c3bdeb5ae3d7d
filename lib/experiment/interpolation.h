// ${...} references in experiment values: `${name}` (a variable), `${stage:NAME}` (a stage's
// directory) and `$${` for a literal `${`.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rqat::experiment {

// A malformed reference or one the resolver rejects; the caller adds where the text came from.
class InterpolationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Replaces every ${inner} of `text` by resolve(inner).
std::string interpolate(const std::string& text,
                        const std::function<std::string(const std::string& inner)>& resolve);

// The inner text when `text` is exactly one reference ("${bits}" -> "bits"), else nullopt: such a
// value takes the variable's type, so a list variable stays a list.
std::optional<std::string> sole_reference(const std::string& text);

// Every ${inner} of `text`, in order (for finding stage references before resolving anything).
std::vector<std::string> references_in(const std::string& text);

}  // namespace rqat::experiment

// ${...} references in experiment values: `${name}` (a variable), `${stage:NAME}` (a stage's
// directory) and `$${` for a literal `${`.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rqat::experiment {

// Bounds on resolving one value (an argument, a label, a tool, ...), nested variables included,
// so that variables that use each other several times cannot multiply into hours of work or
// gigabytes of text (a: "${b}${b}", b: "${c}${c}", ... doubles at every level). A real value
// expands a few references into a few hundred characters.
inline constexpr int kMaxVariableDepth = 64;              // a variable using one using one ...
inline constexpr size_t kMaxReferencesPerValue = 10'000;  // ${...} expanded, at every depth
// Characters produced, at every depth (so the result's length too): far above any real value,
// which becomes one argument of a command (Linux takes at most 128 KiB per argument anyway).
inline constexpr size_t kMaxExpandedCharsPerValue = size_t{1} << 20;

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

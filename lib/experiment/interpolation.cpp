#include "experiment/interpolation.h"

namespace rqat::experiment {

namespace {

// Walks `text`, handing literal runs to `literal` and reference bodies to `reference`.
template <class Literal, class Reference>
void scan(const std::string& text, Literal&& literal, Reference&& reference) {
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 3, "$${") == 0) {
      literal("${");
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") == 0) {
      const size_t close = text.find('}', i + 2);
      if (close == std::string::npos)
        throw InterpolationError("unterminated '${' in '" + text + "'");
      const std::string inner = text.substr(i + 2, close - i - 2);
      if (inner.empty()) throw InterpolationError("empty '${}' in '" + text + "'");
      if (inner.find("${") != std::string::npos)
        throw InterpolationError("nested '${' in '" + text + "'");
      reference(inner);
      i = close + 1;
      continue;
    }
    literal(std::string(1, text[i]));
    ++i;
  }
}

}  // namespace

std::string interpolate(const std::string& text,
                        const std::function<std::string(const std::string& inner)>& resolve) {
  std::string out;
  scan(
      text, [&](const std::string& s) { out += s; },
      [&](const std::string& inner) { out += resolve(inner); });
  return out;
}

std::optional<std::string> sole_reference(const std::string& text) {
  if (text.size() < 4 || text.compare(0, 2, "${") != 0 || text.back() != '}') return std::nullopt;
  const std::string inner = text.substr(2, text.size() - 3);
  if (inner.empty() || inner.find_first_of("${}") != std::string::npos) return std::nullopt;
  return inner;
}

std::vector<std::string> references_in(const std::string& text) {
  std::vector<std::string> found;
  scan(
      text, [](const std::string&) {}, [&](const std::string& inner) { found.push_back(inner); });
  return found;
}

}  // namespace rqat::experiment

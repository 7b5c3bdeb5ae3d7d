// Regular expressions over module names ("model.layers.3.mlp.down_proj"), as quant specs' include
// and exclude lists hold them. Such lists arrive inside checkpoints from strangers, so matching is
// PCRE2 with bounded work: a pattern that nests too deep is refused when compiled, one that
// backtracks catastrophically is refused when matched, instead of overflowing the stack or hanging
// (std::regex does both).
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace rqat::io {

class NamePattern {
 public:
  // ECMAScript-style syntax as far as module names need it (., [], *, +, ?, |, (), \d, anchors).
  // rqat::Error naming `where` when the pattern is not a valid regular expression.
  NamePattern(std::string_view pattern, std::string where);

  // True when the whole of `name` matches (std::regex_match, Python's re.fullmatch); rqat::Error
  // naming `where` when deciding needs more than a bounded amount of backtracking.
  bool full_match(std::string_view name) const;

 private:
  struct Code;
  std::string pattern_;
  std::string where_;
  std::shared_ptr<const Code> code_;
};

}  // namespace rqat::io

// The work of `rqat tokenize`: one line of space-separated token ids per input line.
#pragma once

#include <iosfwd>

#include "tokenizer/tokenizer.h"

namespace rqat::tools {

// Encodes every line of `in` (without its "\n"; a "\r" before it is part of the text) and writes
// its ids, separated by single spaces, as one line of `out`. An empty line gives an empty line (or
// only the special ids when add_special adds some).
void tokenize_lines(const tokenizer::Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                    bool add_special);

}  // namespace rqat::tools

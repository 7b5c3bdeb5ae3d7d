// See tokenize_command.h.
#include "tools/tokenize_command.h"

#include <istream>
#include <ostream>
#include <string>

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::tokenizer;

void tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                    bool add_special) {
  std::string line, text;
  while (std::getline(in, line)) {
    const std::vector<TokenId> ids = tokenizer.encode(line, add_special);
    text.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) text += ' ';
      text += std::to_string(ids[i]);
    }
    text += '\n';
    out << text;
  }
  out.flush();
}

}  // namespace rqat::tools

// The normalizers of tokenizer.json, chained as a Sequence: Unicode normal forms (NFC for Qwen2,
// applied by utf8proc) and the two SentencePiece-style rewrites Llama tokenizers use, Prepend
// ("▁" in front of the text) and Replace (" " -> "▁", literal or regex pattern).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace rqat::tokenizer {

class Normalizer {
 public:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };

  Normalizer() = default;
  explicit Normalizer(std::vector<Form> forms);

  // Steps run in the order they are added.
  void add_form(Form form);
  // Prepend: `prefix` in front of the text, unless the text is empty (as tokenizers does).
  void add_prepend(std::string prefix);
  // Replace: every non-overlapping occurrence of `literal` by `content`.
  void add_replace(std::string literal, std::string content);
  // Replace with a regex pattern: every non-overlapping match by `content`.
  void add_replace(Regex pattern, std::string content);

  bool empty() const { return steps_.empty(); }
  size_t size() const { return steps_.size(); }
  // Names the normalizer in errors raised while normalizing ("FILE: normalizer").
  void set_where(std::string where) { where_ = std::move(where); }
  const std::vector<Form>& forms() const { return forms_; }  // the normal forms in the chain

  // The normalized text: `text` itself when nothing can change (no steps, or only normal forms and
  // pure ASCII, which every normal form leaves alone), else a view of `scratch`. `text` must be
  // valid UTF-8. A chain that would make the text grow past growth_limit.h's bound is an error.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  struct Step {
    enum class Kind { kForm, kPrepend, kReplace } kind = Kind::kForm;
    Form form = Form::kNFC;
    std::string text;            // Prepend: the prefix; Replace: the literal pattern
    std::optional<Regex> regex;  // Replace with a regex pattern
    std::string content;         // Replace: the replacement
  };

  std::vector<Step> steps_;
  std::vector<Form> forms_;
  bool only_forms_ = true;
  std::string where_ = "tokenizer normalizer";
};

}  // namespace rqat::tokenizer

// The normalizers of tokenizer.json that byte-level BPE tokenizers use: Unicode normal forms
// (NFC for Qwen2), possibly chained in a Sequence, applied by utf8proc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rqat::tokenizer {

class Normalizer {
 public:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };

  Normalizer() = default;
  explicit Normalizer(std::vector<Form> forms) : forms_(std::move(forms)) {}

  bool empty() const { return forms_.empty(); }
  const std::vector<Form>& forms() const { return forms_; }

  // The normalized text: `text` itself when nothing can change (no forms, or pure ASCII, which
  // every normal form leaves alone), else a view of `scratch`. `text` must be valid UTF-8.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  std::vector<Form> forms_;
};

}  // namespace rqat::tokenizer

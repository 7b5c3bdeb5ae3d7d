// Builds TokenizerParts from the older file pair vocab.json + merges.txt the way transformers'
// tokenizer classes do: Qwen2Tokenizer (tokenizer_class in tokenizer_config.json) gets NFC, its own
// split regex and a regex-free ByteLevel step; anything else is GPT-2 (ByteLevel with its regex).
#include <fstream>

#include "io/error.h"

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/json_fields.h"

namespace rqat::tokenizer {
namespace {

std::vector<std::pair<std::string, std::string>> read_merges(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path.string());
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // The "#version: 0.2" header of Hugging Face files: skipped only when it is there.
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      fail("{}: line {}: expected two tokens separated by one space", path.string(), line_no);
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

}  // namespace

TokenizerParts parts_from_legacy_files(const std::filesystem::path& dir,
                                       const TokenizerConfigFiles& config) {
  const auto vocab_path = dir / "vocab.json";
  const std::string file = vocab_path.string();
  const json_fields::Json vocab_json = json_fields::read(vocab_path);
  if (!vocab_json.is_object())
    json_fields::bad(file, "(root)", "expected an object of token -> id");
  TokenMap vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items())
    vocab.emplace(token, json_fields::token_id(id, file, json_fields::excerpt(token)));
  const auto merges_path = dir / "merges.txt";
  TokenizerParts parts;
  parts.source = file;
  parts.model = std::make_unique<BpeModel>(std::move(vocab), read_merges(merges_path), BpeOptions{},
                                           file + " + " + merges_path.string());
  if (config.tokenizer_class.starts_with("Qwen2Tokenizer")) {
    parts.normalizer = Normalizer({Normalizer::Form::kNFC});
    parts.pre_tokenizer.add_split(
        SplitStep{Regex(kQwen2Pattern, false, "Qwen2 pattern"), SplitBehavior::kIsolated, false});
    parts.pre_tokenizer.add_byte_level({config.add_prefix_space, false});
  } else {
    parts.pre_tokenizer.add_byte_level({config.add_prefix_space, true});
  }
  parts.byte_level_decoder = true;
  return parts;
}

}  // namespace rqat::tokenizer

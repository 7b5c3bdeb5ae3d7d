// Parity of rqat's tokenizer with Hugging Face: for every text written by
// tests/python/make_tokenizer_fixtures.py, the ids with and without special tokens, decode, and
// decode with skip_special_tokens must equal what `tokenizers`/transformers produced. Qwen2.5 and
// GPT-2 are checked twice: from the saved tokenizer.json and from the legacy vocab.json +
// merges.txt.
#include "catch.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using rqat::tokenizer::StreamDecoder;
using rqat::tokenizer::TokenId;
using rqat::tokenizer::Tokenizer;

std::filesystem::path fixture_dir() {
  const char* dir = std::getenv("RQAT_TOKENIZER_FIXTURES");
  return dir == nullptr ? std::filesystem::path() : std::filesystem::path(dir);
}

std::vector<json> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(json::parse(line));
  return lines;
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += std::to_string(ids[i]) + " ";
  return s + (ids.size() > 40 ? "..." : "");
}

// Compares one loaded tokenizer with the expectations, shows the first differing texts, and
// prints how many texts were compared.
void check_against(const Tokenizer& tok, const std::string& label, const std::vector<json>& texts,
                   const std::vector<json>& expected) {
  REQUIRE(texts.size() == expected.size());
  size_t bad = 0, roundtrips = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const json& e = expected[i];
    const auto want = e["ids"].get<std::vector<TokenId>>();
    const auto want_special = e["ids_special"].get<std::vector<TokenId>>();
    const auto got = tok.encode(text, false);
    const auto got_special = tok.encode(text, true);
    const std::string decoded = tok.decode(want, false);
    const std::string decoded_skip = tok.decode(want_special, true);
    std::string problem;
    if (got != want)
      problem = "ids: got " + show(got) + "want " + show(want);
    else if (got_special != want_special)
      problem = "ids_special: got " + show(got_special) + "want " + show(want_special);
    else if (decoded != e["decoded"].get<std::string>())
      problem = "decode: got '" + decoded + "'";
    else if (decoded_skip != e["decoded_skip"].get<std::string>())
      problem = "decode(skip): got '" + decoded_skip + "'";
    if (problem.empty() && decoded == text) ++roundtrips;
    // Streaming must give the same text as decoding all ids at once.
    if (problem.empty() && i % 7 == 0) {
      StreamDecoder stream(tok, false);
      std::string streamed;
      for (const TokenId id : want) streamed += stream.push(id);
      streamed += stream.flush();
      if (streamed != decoded) problem = "StreamDecoder: got '" + streamed + "'";
    }
    if (!problem.empty()) {
      if (++bad <= 5)
        UNSCOPED_INFO(label << " text " << i << " '" << text.substr(0, 200) << "': " << problem);
    }
  }
  std::cout << label << ": " << texts.size() << " texts compared, " << bad << " differ, "
            << roundtrips << " decode(encode(x)) == x" << std::endl;
  CHECK(bad == 0);
}

struct Fixtures {
  std::filesystem::path dir;
  json manifest;
  std::vector<json> texts;
};

// The fixture directory, read once; nullptr when RQAT_TOKENIZER_FIXTURES is unset or empty.
const Fixtures* fixtures() {
  static const std::optional<Fixtures> loaded = []() -> std::optional<Fixtures> {
    const auto dir = fixture_dir();
    if (dir.empty() || !std::filesystem::exists(dir / "manifest.json")) return std::nullopt;
    return Fixtures{dir, json::parse(std::ifstream(dir / "manifest.json")),
                    read_lines(dir / "texts.jsonl")};
  }();
  return loaded ? &*loaded : nullptr;
}

const json* entry(const std::string& name) {
  for (const json& e : fixtures()->manifest["tokenizers"]) {
    if (e["name"] == name) return &e;
  }
  return nullptr;
}

void check_named(const std::string& name) {
  const json* e = entry(name);
  REQUIRE(e != nullptr);
  const auto expected = read_lines(fixtures()->dir / (name + ".expected.jsonl"));
  const auto tok = Tokenizer::load((*e)["dir"].get<std::string>());
  check_against(*tok, name + " (tokenizer.json)", fixtures()->texts, expected);
  if (e->contains("legacy_dir")) {
    const auto legacy = Tokenizer::load((*e)["legacy_dir"].get<std::string>());
    check_against(*legacy, name + " (vocab.json + merges.txt)", fixtures()->texts, expected);
  }
}

void check_real(const std::string& name) {
  if (fixtures() == nullptr) {
    std::cout << "SKIPPED: RQAT_TOKENIZER_FIXTURES is not set (run through ctest)" << std::endl;
    return;
  }
  if (entry(name) == nullptr) {
    std::cout << "SKIPPED: " << name << ": no tokenizer files under the shared data dir"
              << std::endl;
    return;
  }
  check_named(name);
}

}  // namespace

TEST_CASE("tiny trained tokenizers match Hugging Face tokenizers", "[tiny]") {
  if (fixtures() == nullptr) {
    std::cout << "SKIPPED: RQAT_TOKENIZER_FIXTURES is not set (run through ctest)" << std::endl;
    return;
  }
  int count = 0;
  for (const json& e : fixtures()->manifest["tokenizers"]) {
    const std::string name = e["name"];
    if (name.rfind("tiny_", 0) != 0) continue;
    check_named(name);
    ++count;
  }
  CHECK(count >= 3);
}

TEST_CASE("Qwen2.5 matches transformers (tokenizer.json and legacy files)", "[qwen2.5]") {
  check_real("qwen2.5");
}

TEST_CASE("GPT-2 matches transformers (tokenizer.json and legacy files)", "[gpt2]") {
  check_real("gpt2");
}

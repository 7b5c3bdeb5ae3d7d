// Unit tests of the tokenizer on tiny hand-made files (no Python): the byte-level alphabet, merges
// applied by rank, added-token splitting (longest match, lstrip/rstrip, single_word), legacy files,
// post-processing, streaming decode of multi-byte characters, and one-line errors naming the field.
#include "catch.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "io/error.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tools/tokenize_command.h"

namespace {

using nlohmann::json;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using namespace rqat::tokenizer;
using rqat::tools::tokenize_lines;

std::string sym(std::string_view bytes) {
  std::string out;
  byte_level::append_mapped(bytes, out);
  return out;
}

// Vocabulary: the 256 byte symbols (id = byte value), then `extra` tokens from id 256 on; merges
// are given in raw bytes ("a b") and written in the byte-level alphabet.
json tiny_tokenizer_json(const std::vector<std::string>& extra,
                         const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[sym(std::string(1, static_cast<char>(b)))] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[sym(extra[i])] = 256 + static_cast<int>(i);
  json merge_list = json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(sym(a) + " " + sym(b));
  return {
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json added(int id, const std::string& content, bool special, bool lstrip = false,
           bool rstrip = false, bool single_word = false) {
  return {
      {"id", id},         {"content", content},         {"special", special},    {"lstrip", lstrip},
      {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", !special}};
}

std::shared_ptr<const Tokenizer> load_json(const TempDir& dir, const json& j) {
  write_bytes(dir / "tokenizer.json", j.dump());
  return Tokenizer::load(dir.path());
}

std::vector<TokenId> bytes_of(std::string_view s) {
  std::vector<TokenId> ids;
  for (const char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

}  // namespace

TEST_CASE("byte-level alphabet maps every byte to one printable symbol and back") {
  CHECK(byte_level::mapped_char(' ') == "\xC4\xA0");   // Ġ
  CHECK(byte_level::mapped_char('\n') == "\xC4\x8A");  // Ċ
  CHECK(byte_level::mapped_char(0) == "\xC4\x80");     // Ā
  CHECK(byte_level::mapped_char(0xAD) == "\xC5\x83");  // Ń, the last remapped byte
  CHECK(byte_level::mapped_char('a') == "a");
  CHECK(byte_level::mapped_char(0xE9) == "\xC3\xA9");  // é keeps its Latin-1 value
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  byte_level::append_token_bytes(sym(all), back);
  CHECK(back == all);
  // A token with a character outside the alphabet is taken as it is (added tokens).
  std::string raw;
  byte_level::append_token_bytes(
      "<\xEF\xBD\x9C"
      "User\xEF\xBD\x9C>",
      raw);
  CHECK(raw ==
        "<\xEF\xBD\x9C"
        "User\xEF\xBD\x9C>");
}

TEST_CASE("UTF-8 repair replaces maximal invalid subparts like from_utf8_lossy") {
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(utf8::to_valid("a\xFF"
                       "b") == "a" + fffd + "b");
  CHECK(utf8::to_valid("\xF0\x9F\x98") == fffd);  // truncated emoji: one
  CHECK(utf8::to_valid("\xE0\x80"
                       "x") == fffd + fffd + "x");              // E0 80 is no valid prefix
  CHECK(utf8::to_valid("\xED\xA0\x80") == fffd + fffd + fffd);  // surrogate
  CHECK(utf8::complete_prefix("ab\xF0\x9F") == 2);
  CHECK(utf8::complete_prefix("ab\xFF") == 3);
  CHECK(utf8::complete_prefix("\xC3\xA9") == 2);
}

TEST_CASE("regex translation spells \\s as Unicode White_Space") {
  const std::string t = translate_pattern(R"(\s+(?!\S)|[^\s\p{L}]|\\s)");
  CHECK(t.find("\\s") == t.rfind("\\\\s") + 1);  // only the escaped backslash + s is left
  Regex re(R"(\s+)", false, "test");
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(
      "a\xC2\x85"
      "b\xE1\xA0\x8E"
      "c",
      m);  // U+0085 is White_Space, U+180E is not
  REQUIRE(m.size() == 1);
  CHECK(m[0] == std::pair<size_t, size_t>{1, 3});
}

TEST_CASE("merges apply by rank, not by position") {
  TempDir dir("tok_rank");
  SECTION("b c first") {
    auto tok = load_json(
        dir, tiny_tokenizer_json({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"ab", "c"}}));
    CHECK(tok->encode("abc") == std::vector<TokenId>{'a', 257});
  }
  SECTION("a b first") {
    auto tok = load_json(
        dir, tiny_tokenizer_json({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
    CHECK(tok->encode("abc") == std::vector<TokenId>{258});
    CHECK(tok->encode("abc abc") ==
          std::vector<TokenId>{258, ' ', 258});  // " abc" has no merge for Ġa
    CHECK(tok->decode(tok->encode("abc abc")) == "abc abc");
  }
  SECTION("merges in [a, b] pair form and ignore_merges") {
    json j = tiny_tokenizer_json({"ab", "bc", "abc"}, {});
    j["model"]["merges"] = json::array({json::array({"b", "c"}), json::array({"a", "b"})});
    auto tok = load_json(dir, j);
    CHECK(tok->encode("abc") == std::vector<TokenId>{'a', 257});
    j["model"]["ignore_merges"] = true;  // a word in the vocabulary is taken whole
    tok = load_json(dir, j);
    CHECK(tok->encode("abc") == std::vector<TokenId>{258});
  }
}

TEST_CASE("long words merge in n log n") {
  TempDir dir("tok_long");
  auto tok = load_json(dir, tiny_tokenizer_json({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  const std::string word(200001, 'a');
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok->encode(word);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(ids.size() == 50001);
  CHECK(ids.front() == 257);
  CHECK(ids.back() == 'a');
  CHECK(seconds < 2.0);
  CHECK(tok->decode(ids) == word);
}

TEST_CASE(
    "added tokens split out first: longest match, lstrip/rstrip, single_word, skip on decode") {
  TempDir dir("tok_added");
  json j = tiny_tokenizer_json({}, {});
  j["added_tokens"] =
      json::array({added(300, "<tool>", true, true, true), added(301, "<|a|>", true),
                   added(302, "<|a|>b", true), added(303, "[M]", true, false, false, true),
                   added(304, "word", false)});
  auto tok = load_json(dir, j);
  CHECK(tok->vocab_size() == 305);
  CHECK(tok->is_special(300));
  CHECK_FALSE(tok->is_special(304));
  CHECK(tok->token_to_id("<tool>") == 300);
  CHECK(tok->id_to_token(' ') == "\xC4\xA0");

  // lstrip/rstrip swallow the whitespace around the token.
  std::vector<TokenId> want = bytes_of("hi");
  want.push_back(300);
  for (TokenId id : bytes_of("there")) want.push_back(id);
  CHECK(tok->encode("hi  <tool> \t there") == want);
  // The longest token starting at the leftmost position wins.
  CHECK(tok->encode("x<|a|>by") == std::vector<TokenId>{'x', 302, 'y'});
  CHECK(tok->encode("x<|a|>cy") == std::vector<TokenId>{'x', 301, 'c', 'y'});
  // single_word: only between non-word characters.
  CHECK(tok->encode("a[M]b") == bytes_of("a[M]b"));
  CHECK(tok->encode("a [M] b") == std::vector<TokenId>{'a', ' ', 303, ' ', 'b'});
  // A non-special added token inside a word is still split out (normalized=true, no normalizer).
  CHECK(tok->encode("swordfish") == std::vector<TokenId>{'s', 304, 'f', 'i', 's', 'h'});

  const std::vector<TokenId> ids = tok->encode("x<|a|>cy word");
  CHECK(tok->decode(ids) == "x<|a|>cy word");
  CHECK(tok->decode(ids, true) == "xcy word");
  CHECK(tok->token_bytes(301, true).empty());
  CHECK(tok->token_bytes(301, false) == "<|a|>");
}

TEST_CASE("decode(encode(x)) == x without a normalizer") {
  TempDir dir("tok_roundtrip");
  auto tok = load_json(dir, tiny_tokenizer_json({"ab", "Ġa"}, {{"a", "b"}}));
  for (const std::string s :
       {"", " ", "hello  world\n\n\tx", "你好，世界", "emoji 😀👨‍👩‍👧 flags 🇯🇵",
        "e\xCC\x81 A\xCC\x8A", "nul\0byte", "ab ab ab  ab\r\n"}) {
    CHECK(tok->decode(tok->encode(s)) == s);
  }
  // Invalid UTF-8 input is repaired first (Python strings cannot hold it).
  CHECK(tok->decode(tok->encode("a\xFF"
                                "b")) ==
        "a\xEF\xBF\xBD"
        "b");
}

TEST_CASE("StreamDecoder never splits a UTF-8 character") {
  TempDir dir("tok_stream");
  auto tok = load_json(dir, tiny_tokenizer_json({}, {}));
  const std::string text = "é😀x中";
  const auto ids = tok->encode(text);
  REQUIRE(ids.size() == text.size());  // one token per byte: no merges
  StreamDecoder stream(*tok, false);
  std::vector<std::string> pieces;
  for (const TokenId id : ids) pieces.push_back(stream.push(id));
  CHECK(pieces == std::vector<std::string>{"", "é", "", "", "", "😀", "x", "", "", "中"});
  CHECK(stream.flush().empty());

  StreamDecoder broken(*tok, false);
  CHECK(broken.push(0xF0).empty());
  CHECK(broken.push(0x9F).empty());
  CHECK(broken.push('a') ==
        "\xEF\xBF\xBD"
        "a");  // the cut-short emoji becomes one U+FFFD
  CHECK(broken.push(0xE4).empty());
  CHECK(broken.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("post-processor: TemplateProcessing, and add_bos_token from tokenizer_config.json") {
  TempDir dir("tok_post");
  json j = tiny_tokenizer_json({}, {});
  j["added_tokens"] =
      json::array({added(256, "<|begin_of_text|>", true), added(257, "<|end|>", true)});
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({{{"type", "ByteLevel"}},
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken",
                                               {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                     {"special_tokens",
                      {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {256}}}}}}}})}};
  auto tok = load_json(dir, j);
  CHECK(tok->encode("hi", true) == std::vector<TokenId>{256, 'h', 'i'});
  CHECK(tok->encode("hi", false) == std::vector<TokenId>{'h', 'i'});

  // add_bos_token/add_eos_token in the config replace the template, as transformers does.
  write_bytes(
      dir / "tokenizer_config.json",
      R"({"bos_token": {"content": "<|begin_of_text|>", "lstrip": false}, "eos_token": "<|end|>",
                  "add_bos_token": false, "add_eos_token": true, "chat_template": "{{ x }}"})");
  tok = Tokenizer::load(dir.path());
  CHECK(tok->encode("hi", true) == std::vector<TokenId>{'h', 'i', 257});
  CHECK_FALSE(tok->config().add_bos_token);
  CHECK(tok->config().add_eos_token);
  CHECK(tok->config().bos_token == "<|begin_of_text|>");
  CHECK(tok->config().chat_template == "{{ x }}");
}

TEST_CASE("legacy vocab.json + merges.txt + tokenizer_config.json") {
  TempDir dir("tok_legacy");
  json vocab = tiny_tokenizer_json({"12", "123", "Ġ1"}, {})["model"]["vocab"];
  write_bytes(dir / "vocab.json", vocab.dump());
  const std::string merges = "1 2\n12 3\n";
  SECTION("GPT-2 regex when no config; #version line optional") {
    write_bytes(dir / "merges.txt", "#version: 0.2\n" + merges);
    auto tok = Tokenizer::load(dir.path());
    CHECK(tok->encode("123") == std::vector<TokenId>{257});
    write_bytes(dir / "merges.txt", merges);
    tok = Tokenizer::load(dir.path());
    CHECK(tok->encode("123") == std::vector<TokenId>{257});
  }
  SECTION("Qwen2Tokenizer: its regex (single digits), NFC, added_tokens_decoder") {
    write_bytes(dir / "merges.txt", merges);
    write_bytes(dir / "tokenizer_config.json",
                R"({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>",
        "bos_token": null, "add_bos_token": false,
        "added_tokens_decoder": {"300": {"content": "<|im_end|>", "special": true, "lstrip": false,
          "rstrip": false, "normalized": false, "single_word": false}}})");
    auto tok = Tokenizer::load(dir.path());
    CHECK(tok->encode("123") == std::vector<TokenId>{'1', '2', '3'});
    CHECK(tok->encode("e\xCC\x81<|im_end|>") == std::vector<TokenId>{0xC3, 0xA9, 300});  // NFC: é
    CHECK(tok->config().eos_token == "<|im_end|>");
    CHECK_FALSE(tok->config().bos_token.has_value());
    CHECK(tok->added_tokens().size() == 1);
    CHECK(tok->vocab_size() == 301);
  }
  SECTION("a bad merges line names the file and line") {
    write_bytes(dir / "merges.txt", "1 2\n12\n");
    require_error([&] { Tokenizer::load(dir.path()); }, {"merges.txt", "line 2"});
  }
}

TEST_CASE("malformed tokenizer.json: one-line errors naming file and field") {
  TempDir dir("tok_errors");
  const json good = tiny_tokenizer_json({"ab"}, {{"a", "b"}});
  auto expect = [&](const json& j, std::initializer_list<std::string> needles) {
    write_bytes(dir / "tokenizer.json", j.dump());
    require_error([&] { Tokenizer::load(dir.path()); }, needles);
  };
  write_bytes(dir / "tokenizer.json", "{\"model\": ");
  require_error([&] { Tokenizer::load(dir.path()); }, {"tokenizer.json", "invalid JSON"});

  json j = good;
  j["model"].erase("vocab");
  expect(j, {"tokenizer.json", "model.vocab", "missing"});
  j = good;
  j["model"]["merges"] = json::array({"a b", "abc"});
  expect(j, {"tokenizer.json", "model.merges[1]"});
  j = good;
  j["model"]["merges"] = json::array({"a x"});
  j["model"]["vocab"].erase("x");
  expect(j, {"tokenizer.json", "model.merges[0]", "vocabulary"});
  j = good;
  j["model"]["type"] = "WordPiece";
  expect(j, {"tokenizer.json", "model.type", "WordPiece"});
  j = good;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Whitespace"}}})}};
  expect(j, {"tokenizer.json", "pre_tokenizer.pretokenizers[0].type", "Whitespace"});
  j = good;
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect(j, {"tokenizer.json", "pre_tokenizer.pattern.Regex", "invalid regex"});
  j = good;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}};
  expect(j, {"tokenizer.json", "pre_tokenizer.behavior", "Sideways"});
  j = good;
  j["normalizer"] = {{"type", "Lowercase"}};
  expect(j, {"tokenizer.json", "normalizer.type", "Lowercase"});
  j = good;
  j["added_tokens"] = json::array({{{"content", "<x>"}}});
  expect(j, {"tokenizer.json", "added_tokens[0].id", "missing"});
  j = good;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
      {"special_tokens", json::object()}};
  expect(j, {"tokenizer.json", "post_processor.special_tokens.<s>"});

  TempDir empty("tok_errors_empty");
  require_error([&] { Tokenizer::load(empty.path()); }, {"no tokenizer.json"});
  write_bytes(dir / "tokenizer.json", good.dump());
  write_bytes(dir / "tokenizer_config.json", R"({"bos_token": 5})");
  require_error([&] { Tokenizer::load(dir.path()); }, {"tokenizer_config.json", "bos_token"});
}

TEST_CASE("tokenize_lines prints one line of ids per input line") {
  TempDir dir("tok_lines");
  auto tok = load_json(dir, tiny_tokenizer_json({"ab"}, {{"a", "b"}}));
  std::istringstream in("ab\n\nb a\n");
  std::ostringstream out;
  tokenize_lines(*tok, in, out, false);
  CHECK(out.str() == "256\n\n98 32 97\n");
}

TEST_CASE("encode is safe to call from several threads") {
  TempDir dir("tok_threads");
  auto tok = load_json(dir, tiny_tokenizer_json({"ab", "abab"}, {{"a", "b"}, {"ab", "ab"}}));
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back(std::string(static_cast<size_t>(i % 37), 'a') + " abab" + std::to_string(i));
  std::vector<std::vector<TokenId>> want;
  for (const auto& t : texts) want.push_back(tok->encode(t));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) bad[t] += tok->encode(texts[i]) != want[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad == std::vector<int>(4, 0));
}

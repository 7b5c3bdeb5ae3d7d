// Hostile tokenizer files and chat templates (issue 18, classes 3 and 4; docs/reliability.md):
// every input here is generated, and each either works or ends in one line naming the file and the
// field. Sequences nested past 64 levels, ids near 2^31, Replace chains that double the text,
// megabyte inputs to encode/decode, llama2.c files whose pieces would make the merge search
// quadratic, and Jinja templates of 10^5 nested constructs or unterminated literals.
#include "catch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <regex>
#include <string>

#include "chat/chat_template.h"
#include "io/error.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/llama2c_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using rqat::chat::ChatTemplate;
using rqat::chat::Message;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using namespace rqat::tokenizer;

std::string sym(std::string_view bytes) {
  std::string out;
  byte_level::append_mapped(bytes, out);
  return out;
}

// A byte-level tokenizer: the 256 byte symbols (id = byte), then `extra` tokens from 256 on, with
// merges given in raw bytes.
json byte_level_json(const std::vector<std::string>& extra = {},
                     const std::vector<std::pair<std::string, std::string>>& merges = {}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[sym(std::string(1, static_cast<char>(b)))] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[sym(extra[i])] = 256 + static_cast<int>(i);
  json merge_list = json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(sym(a) + " " + sym(b));
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

// A plain vocabulary without pre-tokenizer, for tests of ids and merges.
json plain_json(const json& vocab, const json& merges = json::array()) {
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::shared_ptr<const Tokenizer> from_text(const json& tokenizer, const std::string& config = "") {
  return Tokenizer::from_json_text(tokenizer.dump(), config, "hostile");
}

void expect_tokenizer_error(const json& tokenizer, std::initializer_list<std::string> needles,
                            const std::string& config = "") {
  require_error([&] { from_text(tokenizer, config); }, needles);
}

// {"type": "Sequence", <list_key>: [ ... [inner] ... ]} nested `depth` times around `inner`.
json nested_sequence(const char* list_key, size_t depth, const json& inner) {
  json j = inner;
  for (size_t i = 0; i < depth; ++i) j = {{"type", "Sequence"}, {list_key, json::array({j})}};
  return j;
}

template <class Fn>
double seconds(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// ------------------------------------------------------------------------------- tokenizer.json

TEST_CASE("tokenizer.json: Sequences nested past 64 levels are refused, naming the component") {
  const json nfc = {{"type", "NFC"}};
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  const json fuse = {{"type", "Fuse"}};
  const json bos = {{"type", "BertProcessing"}, {"cls", {"a", 97}}, {"sep", {"b", 98}}};
  struct Component {
    const char* key;
    const char* list_key;
    json inner;
  };
  for (const Component& c :
       {Component{"normalizer", "normalizers", nfc},
        Component{"pre_tokenizer", "pretokenizers", byte_level},
        Component{"decoder", "decoders", fuse}, Component{"post_processor", "processors", bos}}) {
    INFO(c.key);
    json j = byte_level_json();
    // 200 levels: 400 JSON levels, within the JSON limit of 512, so the tokenizer's own bound acts.
    j[c.key] = nested_sequence(c.list_key, 200, c.inner);
    expect_tokenizer_error(j, {"hostile/tokenizer.json", c.key, "nested deeper than 64"});
    // Ordinary nesting loads.
    j[c.key] = nested_sequence(c.list_key, 3, c.inner);
    CHECK_NOTHROW(from_text(j));
  }
  // 10^5 levels never reach the tokenizer: the JSON nesting check refuses them first.
  json j = byte_level_json();
  std::string text = j.dump();
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"type":"Sequence","normalizers":[)";
  deep += R"({"type":"NFC"})";
  for (int i = 0; i < 100000; ++i) deep += "]}";
  text.insert(1, "\"normalizer\": " + deep + ",");
  require_error([&] { Tokenizer::from_json_text(text, "", "hostile"); },
                {"hostile/tokenizer.json", "nested deeper than 512"});
}

TEST_CASE("tokenizer.json: more than 256 steps in one component are refused") {
  json j = byte_level_json();
  json list = json::array();
  for (int i = 0; i < 1000; ++i) list.push_back({{"type", "NFC"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", list}};
  expect_tokenizer_error(j, {"hostile/tokenizer.json", "normalizer", "1000 steps", "256"});
  j = byte_level_json();
  list = json::array();
  for (int i = 0; i < 1000; ++i) list.push_back({{"type", "Fuse"}});
  j["decoder"] = {{"type", "Sequence"}, {"decoders", list}};
  expect_tokenizer_error(j, {"hostile/tokenizer.json", "decoder", "1000 steps"});
}

TEST_CASE("tokenizer.json: ids near 2^31 are refused before any table is sized by them") {
  // model.vocab: 2^31 - 1, 5 x 10^8, beyond int32, negative.
  for (const int64_t id : {int64_t{2147483647}, int64_t{500000000}}) {
    INFO(id);
    const auto start = std::chrono::steady_clock::now();
    expect_tokenizer_error(plain_json({{"a", 0}, {"b", id}}),
                           {"hostile/tokenizer.json", "model.vocab", "'b'", std::to_string(id),
                            "far beyond the 2 entries"});
    // Refused at once, not after allocating a table of `id` strings.
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }
  expect_tokenizer_error(plain_json({{"a", 0}, {"b", int64_t{1} << 40}}),
                         {"hostile/tokenizer.json", "model.vocab['b']", "out of range"});
  expect_tokenizer_error(plain_json({{"a", 0}, {"b", uint64_t{18446744073709551615ULL}}}),
                         {"hostile/tokenizer.json", "model.vocab['b']", "out of range"});
  expect_tokenizer_error(plain_json({{"a", 0}, {"b", -1}}),
                         {"hostile/tokenizer.json", "model.vocab['b']", "out of range"});
  expect_tokenizer_error(plain_json({{"a", 0}, {"b", 1.5}}),
                         {"hostile/tokenizer.json", "model.vocab['b']", "integer"});
  expect_tokenizer_error(plain_json({{"a", 7}, {"b", 7}}),
                         {"hostile/tokenizer.json", "model.vocab", "both have id 7"});

  // A few holes are fine: ids count from the largest.
  const auto holes = from_text(plain_json({{"a", 0}, {"b", 1000}}));
  CHECK(holes->vocab_size() == 1001);
  CHECK(holes->id_to_token(1000) == "b");
  CHECK(holes->id_to_token(500).empty());

  // added_tokens in tokenizer.json.
  json j = plain_json({{"a", 0}, {"b", 1}});
  j["added_tokens"] = json::array({{{"id", 2147483647}, {"content", "<x>"}, {"special", true}}});
  expect_tokenizer_error(
      j, {"hostile/tokenizer.json", "added_tokens[0].id", "'<x>'", "2147483647", "far beyond"});
  j["added_tokens"] = json::array({{{"id", -3}, {"content", "<x>"}}});
  expect_tokenizer_error(j, {"hostile/tokenizer.json", "added_tokens[0].id", "out of range"});

  // added_tokens_decoder in tokenizer_config.json.
  const json plain = plain_json({{"a", 0}, {"b", 1}});
  expect_tokenizer_error(
      plain, {"hostile/tokenizer_config.json", "added_tokens_decoder", "500000000", "far beyond"},
      R"({"added_tokens_decoder": {"500000000": {"content": "<x>", "special": true}}})");
  for (const char* key : {"99999999999", "-1", "+5", " 5", "05", "x"}) {
    INFO(key);
    expect_tokenizer_error(
        plain, {"hostile/tokenizer_config.json", "added_tokens_decoder", "token id"},
        std::string(R"({"added_tokens_decoder": {")") + key + R"(": {"content": "<x>"}}})");
  }
  // The post-processor's ids go straight into encode's output: unknown ones are refused.
  j = plain;
  j["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"a", 0}}, {"sep", {"z", 2000000000}}};
  expect_tokenizer_error(j, {"hostile/tokenizer.json", "post_processor", "2000000000"});
  j["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"a", 0}}, {"sep", {"z", 1LL << 33}}};
  expect_tokenizer_error(j, {"hostile/tokenizer.json", "post_processor.sep[1]", "out of range"});
}

TEST_CASE("tokenizer.json: bad merges, invalid UTF-8, huge tokens: one short line") {
  expect_tokenizer_error(
      plain_json({{"a", 0}, {"b", 1}}, json::array({"a x"})),
      {"hostile/tokenizer.json", "model.merges[0]", "missing from the vocabulary"});
  expect_tokenizer_error(plain_json({{"a", 0}, {"b", 1}}, json::array({"a b"})),
                         {"hostile/tokenizer.json", "model.merges[0]", "'ab'"});
  // A megabyte token named in an error is cut short: the message stays one short line.
  const std::string huge(1 << 20, 'x');
  try {
    from_text(plain_json({{"a", 0}, {huge, 1}}, json::array({{"a", huge}})));
    FAIL("expected an error");
  } catch (const rqat::Error& e) {
    const std::string message = e.what();
    CHECK(message.find("model.merges[0]") != std::string::npos);
    CHECK(message.find("1048577 bytes") != std::string::npos);  // "a" + the token
    CHECK(message.size() < 300);
  }
  // Raw invalid UTF-8 and a lone surrogate escape in a vocabulary key: invalid JSON.
  const std::string good = plain_json({{"a", 0}, {"PLACEHOLDER", 1}}).dump();
  for (const std::string bad : {"\xFF\xFE", "\\ud800"}) {
    std::string text = good;
    text.replace(text.find("PLACEHOLDER"), 11, bad);
    require_error([&] { Tokenizer::from_json_text(text, "", "hostile"); },
                  {"hostile/tokenizer.json", "invalid JSON"});
  }
  // A huge but valid vocabulary string loads and round-trips.
  const auto tok = from_text(plain_json({{"a", 0}, {huge, 1}}));
  CHECK(tok->token_to_id(huge) == 1);
  CHECK(tok->decode(std::vector<TokenId>{1, 0}) == huge + " a");
}

TEST_CASE("tokenizer.json: Replace chains that double the text are refused, not run") {
  // 64 Replace steps "a" -> "aa": 2^64 bytes from one "a".
  json j = byte_level_json();
  json doubling = json::array();
  for (int i = 0; i < 64; ++i)
    doubling.push_back({{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", doubling}};
  const auto normalizing = from_text(j);
  require_error([&] { normalizing->encode("a"); },
                {"hostile/tokenizer.json: normalizer", "grow past"});
  // An empty regex matches at every position; a 1 MB content would make 10^12 bytes of 1 MB.
  j["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"Regex", ""}}}, {"content", std::string(1 << 20, 'b')}};
  const auto empty_regex = from_text(j);
  require_error([&] { empty_regex->encode(std::string(1 << 20, 'a')); },
                {"hostile/tokenizer.json: normalizer", "grow past"});

  j = byte_level_json();
  j["decoder"] = {{"type", "Sequence"}, {"decoders", doubling}};
  const auto decoding = from_text(j);
  require_error([&] { decoding->decode(std::vector<TokenId>{'a'}); },
                {"hostile/tokenizer.json: decoder", "grow past"});
  StreamDecoder stream(*decoding, false);
  require_error([&] { stream.push('a'); }, {"hostile/tokenizer.json: decoder", "grow past"});
  // Ordinary growth (one Replace of " " by three bytes) is fine.
  j["decoder"] = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "xyz"}};
  CHECK(from_text(j)->decode(std::vector<TokenId>{'a', 'a'}) == "xyzxyz");
}

TEST_CASE("encode/decode of hostile text: megabyte runs, invalid UTF-8, ids out of range") {
  // Merges that build "aaaa": a megabyte of 'a' is one pre-tokenized word of 10^6 symbols.
  const auto tok = from_text(byte_level_json({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  for (const char c : {'a', ' ', '\'', '\n', '1', '\xE9'}) {
    INFO(static_cast<int>(c));
    const std::string text(1 << 20, c);
    std::vector<TokenId> ids;
    CHECK(seconds([&] { ids = tok->encode(text); }) < 20);
    const std::string back = tok->decode(ids);
    if (c == '\xE9') {
      // Invalid UTF-8 input is repaired first: each stray byte becomes U+FFFD.
      CHECK(back.size() == 3 * text.size());
    } else {
      CHECK(back == text);
    }
    if (c == 'a') CHECK(ids.size() == text.size() / 4);
  }
  // Ids that are no token decode to nothing (as in tokenizers), in decode and in streams.
  const std::vector<TokenId> bad = {-1, -2147483647 - 1, 2147483647, 1000000000, 258, 97};
  CHECK(tok->decode(bad) == "a");
  CHECK(tok->id_to_token(2147483647).empty());
  CHECK_FALSE(tok->is_special(-5));
  StreamDecoder stream(*tok, true);
  std::string streamed;
  for (const TokenId id : bad) streamed += stream.push(id);
  CHECK(streamed + stream.flush() == "a");
}

TEST_CASE("added tokens: 10^4 tokens sharing a long prefix cost the prefix per position, no more") {
  json j = byte_level_json();
  const std::string prefix(100, 'a');
  json added = json::array();
  for (int i = 0; i < 10000; ++i)
    added.push_back({{"id", 256 + i}, {"content", prefix + std::to_string(i)}, {"special", true}});
  j["added_tokens"] = added;
  const auto tok = from_text(j);
  // Trying every candidate at every position took 10^12 byte comparisons here.
  const std::string text(1 << 20, 'a');
  std::vector<TokenId> ids;
  CHECK(seconds([&] { ids = tok->encode(text + prefix + "42" + text); }) < 20);
  CHECK(std::count(ids.begin(), ids.end(), 256 + 42) == 1);
  // Longest match wins where patterns nest ("...1" and "...12").
  CHECK(tok->encode(prefix + "12") == std::vector<TokenId>{256 + 12});
  // A normalized added token whose content normalizes to nothing is never matched (an empty
  // pattern matched everywhere without advancing).
  j = byte_level_json();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", ""}};
  j["added_tokens"] = json::array({{{"id", 256}, {"content", "x"}, {"normalized", true}}});
  CHECK(from_text(j)->encode(std::string("a\0b", 3)) == std::vector<TokenId>{'a', 0, 'b'});
}

TEST_CASE("tokenizer_config.json: hostile fields are one-line errors") {
  const json j = byte_level_json();
  struct Case {
    const char* config;
    std::initializer_list<std::string> needles;
  };
  for (const Case& c : {
           Case{R"([1, 2])", {"(root)", "expected an object"}},
           Case{R"({"chat_template": 5})", {"chat_template", "expected a string or a list"}},
           Case{R"({"chat_template": [5]})", {"chat_template[0].name", "missing"}},
           Case{R"({"chat_template": [{"name": 5}]})", {"chat_template[0].name"}},
           Case{R"({"bos_token": [1]})", {"bos_token"}},
           Case{R"({"eos_token": {"content": 5}})", {"eos_token.content"}},
           Case{R"({"add_bos_token": "yes"})", {"add_bos_token"}},
           Case{R"({"added_tokens_decoder": []})", {"added_tokens_decoder", "expected an object"}},
           Case{R"({"added_tokens_decoder": {"300": 5}})", {"added_tokens_decoder.'300'"}},
           Case{R"({"tokenizer_class": 5})", {"tokenizer_class"}},
           Case{R"({"additional_special_tokens": [5]})", {"additional_special_tokens[0]"}},
           Case{R"({"chat_template": )", {"invalid JSON"}},
       }) {
    INFO(c.config);
    require_error([&] { Tokenizer::from_json_text(j.dump(), c.config, "hostile"); },
                  {"hostile/tokenizer_config.json"});
    require_error([&] { Tokenizer::from_json_text(j.dump(), c.config, "hostile"); }, c.needles);
  }
  // 10^5 levels in the config: the JSON nesting limit.
  require_error(
      [&] {
        // Built by append (GCC 12 warns falsely on operator+ of a literal and a temporary).
        std::string deep = "{\"x\": ";
        deep.append(100000, '[').append("}");
        Tokenizer::from_json_text(j.dump(), deep, "hostile");
      },
      {"hostile/tokenizer_config.json", "nested deeper than 512"});
  // A config that gives an id twice, once against tokenizer.json: loads, nothing dangles.
  json with_added = j;
  with_added["added_tokens"] = json::array({{{"id", 256}, {"content", "<a>"}, {"special", true}},
                                            {{"id", 256}, {"content", "<b>"}, {"special", true}},
                                            {{"id", 257}, {"content", "<a>"}, {"special", true}}});
  const auto tok = Tokenizer::from_json_text(
      with_added.dump(), R"({"added_tokens_decoder": {"256": {"content": "<c>"}}})", "hostile");
  CHECK(tok->token_to_id("<a>") == 257);
  CHECK(tok->encode("<b><a>").size() == 2);
}

TEST_CASE("tokenizer: the directory loader and the in-memory loader agree") {
  TempDir dir("hostile_tok_dir");
  json j = byte_level_json({"aa"}, {{"a", "a"}});
  j["added_tokens"] = json::array({{{"id", 257}, {"content", "<x>"}, {"special", true}}});
  const std::string config = R"({"bos_token": "<x>", "add_bos_token": true})";
  write_bytes(dir / "tokenizer.json", j.dump());
  write_bytes(dir / "tokenizer_config.json", config);
  const auto from_dir = Tokenizer::load(dir.path());
  const auto from_memory = Tokenizer::from_json_text(j.dump(), config, dir.path());
  for (const std::string text : {"aaa b", "<x>a", ""}) {
    CHECK(from_dir->encode(text, true) == from_memory->encode(text, true));
  }
  CHECK(from_memory->encode("a", true).front() == 257);
  // Errors from the directory name the same file as from memory.
  j["model"]["vocab"]["zz"] = 1 << 30;
  write_bytes(dir / "tokenizer.json", j.dump());
  require_error([&] { Tokenizer::load(dir.path()); },
                {(dir / "tokenizer.json").string(), "model.vocab", "'zz'"});
}

// ---------------------------------------------------------------------------- llama2.c tokenizer

namespace {

std::string llama2c_bin(int32_t max_token_length, const std::vector<std::string>& pieces) {
  std::string out(4, '\0');
  std::memcpy(out.data(), &max_token_length, 4);
  for (const std::string& p : pieces) {
    const float score = 0;
    const auto length = static_cast<int32_t>(p.size());
    out.append(reinterpret_cast<const char*>(&score), 4);
    out.append(reinterpret_cast<const char*>(&length), 4);
    out += p;
  }
  return out;
}

}  // namespace

TEST_CASE("llama2.c tokenizer.bin: sizes are bounded by the header and by the work they ask") {
  TempDir dir("hostile_l2c");
  const auto file = dir / "tok.bin";
  const std::vector<std::string> specials = {"<unk>", "\n<s>\n", "\n</s>\n"};
  // A piece longer than the max_token_length the file declares.
  auto pieces = specials;
  pieces.push_back("abcdefghij");
  write_bytes(file, llama2c_bin(8, pieces));
  require_error([&] { read_llama2c_vocab(file); },
                {"tok.bin", "token 3", "length 10", "max_token_length 8"});
  // Lengths that claim more than the file holds, or wrap around as signed numbers.
  std::string truncated = llama2c_bin(16, specials);
  const int32_t claimed = 2147483647;
  truncated.append(4, '\0').append(reinterpret_cast<const char*>(&claimed), 4);
  write_bytes(file, truncated);
  require_error([&] { read_llama2c_vocab(file); }, {"tok.bin", "token 3", "length 2147483647"});
  // Two 64 KiB pieces: 2^33 bytes of lookups to derive merges, refused rather than run.
  pieces = specials;
  pieces.push_back(std::string(1 << 16, 'a'));
  pieces.push_back(std::string(1 << 16, 'b'));
  write_bytes(file, llama2c_bin(1 << 16, pieces));
  const Llama2cVocab vocab = read_llama2c_vocab(file);
  require_error([&] { llama2c_vocab_to_hf(vocab, 64, "tok.bin"); },
                {"tok.bin", "too long in total", "merges"});
}

// ------------------------------------------------------------------------------- chat templates

namespace {

const std::vector<Message> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "2+2?"}};

std::string repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// Either recognized and rendered, or the one-line error naming the source and chat_template.
void recognize_or_refuse(const std::string& jinja, const std::string& source) {
  try {
    const ChatTemplate t = ChatTemplate::recognize(jinja, "<s>", "</s>", source);
    CHECK_FALSE(t.render(kConversation).empty());
  } catch (const rqat::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find(source) != std::string::npos);
    CHECK(message.find("chat_template") != std::string::npos);
  }
}

const std::string kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}";

// What the std::regex this replaces extracted as ChatML's default system prompt (still fine on
// the short inputs of the comparison below).
std::optional<std::string> regex_default_system(const std::string& jinja) {
  static const std::regex pattern(
      R"re('<\|im_start\|>system\\n((?:[^'\\]|\\.)*)<\|im_end\|>\\n')re");
  std::smatch match;
  if (!std::regex_search(jinja, match, pattern)) return std::nullopt;
  return match[1].str();
}

}  // namespace

TEST_CASE("chat templates: 10^5 nested or unterminated constructs never crash or hang") {
  const size_t n = 100000;
  const std::vector<std::string> hostile = {
      repeat("{% if x %}", n) + repeat("{% endif %}", n),
      "{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}",
      repeat("{%", n),
      repeat("{{", n),
      repeat("{#", n),
      "{{ '" + std::string(n, '\\') + std::string(n, 'x'),
      // The family markers with the same constructs around them: recognized, then rendered.
      kChatML + repeat("{% if x %}", n) + repeat("{% endif %}", n),
      kChatML + "{{ '<|im_start|>system\\n" + std::string(10 * n, 'x'),
      kChatML + repeat("{{ '<|im_start|>system\\n\\'", n),
      kChatML + repeat("'<|im_start|>system\\n\\", n) + "<|im_end|>\\n",
      "<|start_header_id|><|eot_id|>Cutting Knowledge Date {% set date_string = \"" +
          std::string(10 * n, 'x'),
      "<|start_header_id|><|eot_id|>" + repeat("date_string = ", n) + repeat("\"\"", n),
  };
  for (size_t i = 0; i < hostile.size(); ++i) {
    INFO("template " << i);
    CHECK(seconds([&] { recognize_or_refuse(hostile[i], "hostile/tokenizer_config.json"); }) < 5);
  }
}

TEST_CASE("chat templates: the default system prompt scan matches the regex it replaces") {
  // Short random texts over the characters that matter, where the old regex is still safe.
  const std::vector<std::string> parts = {"'<|im_start|>system\\n",
                                          "<|im_end|>\\n'",
                                          "\\'",
                                          "'",
                                          "\\\\",
                                          "\\",
                                          "\n",
                                          "x",
                                          "<|im_end|>",
                                          "\\n"};
  std::mt19937 rng(7);
  int found = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string body;
    const int count = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < count; ++k) body += parts[rng() % parts.size()];
    const std::string jinja = kChatML + body;
    const auto expected = regex_default_system(jinja);
    const ChatTemplate t = ChatTemplate::recognize(jinja, "", "", "fuzz");
    const std::string rendered = t.render({{"user", "u"}}, {false});
    INFO(jinja);
    if (expected) {
      ++found;
      // The renderer unescapes \n, \t, \\ and \' in the prompt it found.
      std::string unescaped;
      for (size_t i = 0; i < expected->size(); ++i) {
        char c = (*expected)[i];
        if (c == '\\' && i + 1 < expected->size()) {
          c = (*expected)[++i];
          c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        unescaped += c;
      }
      CHECK(rendered.starts_with("<|im_start|>system\n" + unescaped + "<|im_end|>\n"));
    } else {
      CHECK(rendered.starts_with("<|im_start|>user\n"));
    }
  }
  CHECK(found > 50);
  // The Qwen2.5 form.
  const ChatTemplate qwen = ChatTemplate::recognize(
      kChatML + "{{ '<|im_start|>system\\nYou are Qwen, \\'helpful\\'.<|im_end|>\\n' }}", "", "",
      "qwen");
  CHECK(qwen.render({{"user", "u"}}, {false}) ==
        "<|im_start|>system\nYou are Qwen, 'helpful'.<|im_end|>\n<|im_start|>user\nu<|im_end|>\n");
}

TEST_CASE("chat templates: the Llama 3.1 default date is found by a plain scan") {
  const std::string base = "<|start_header_id|><|eot_id|>Cutting Knowledge Date";
  auto date_line = [&](const std::string& jinja) {
    const std::string out =
        ChatTemplate::recognize(base + jinja, "", "", "t").render({{"user", "u"}});
    const size_t at = out.find("Today Date: ");
    return out.substr(at + 12, out.find('\n', at) - at - 12);
  };
  CHECK(date_line("{% set date_string = \"1 Jan 2025\" %}") == "1 Jan 2025");
  CHECK(date_line("{% set date_string=\n\"2 Feb\" %}") == "2 Feb");
  CHECK(date_line("date_string = \"\" date_string = \"3 Mar\"") == "3 Mar");
  CHECK(date_line("date_string := \"x\"") == "26 Jul 2024");
  CHECK(date_line("date_string = \"unterminated") == "26 Jul 2024");
}

TEST_CASE("chat templates from files: hostile tokenizer_config.json, chat_template.jinja, YAML") {
  TempDir dir("hostile_chat");
  // A 10^5-deep template in chat_template.jinja: the error names that file and chat_template.
  write_bytes(dir / "chat_template.jinja", repeat("{% if x %}", 100000));
  require_error([&] { ChatTemplate::load(dir.path()); },
                {"chat_template.jinja", "chat_template", "not a recognized format"});
  std::filesystem::remove(dir / "chat_template.jinja");
  // Named templates whose fields have the wrong types are skipped, not a JSON exception.
  write_bytes(dir / "tokenizer_config.json",
              R"({"chat_template": [5, {"name": 5}, {"name": "default", "template": 7}]})");
  require_error([&] { ChatTemplate::load(dir.path()); }, {"no chat template"});
  write_bytes(dir / "tokenizer_config.json",
              json{{"chat_template", "{{ " + std::string(100000, '(') + " }}"}}.dump());
  require_error([&] { ChatTemplate::load(dir.path()); },
                {"tokenizer_config.json", "chat_template", "not a recognized format"});

  // Placeholder files: nested 10^5 deep, keys that are lists, aliases.
  const std::vector<std::string> hostile_yaml = {
      std::string(100000, '['), "user: " + std::string(100000, '{'), "[a]: b\n", "? {a: b}\n: c\n",
      "user: &x {content}\nassistant: *x\nsystem: [*x]\n"};
  for (const std::string& yaml : hostile_yaml) {
    require_error([&] { ChatTemplate::from_placeholder_text(yaml, "t.yaml"); }, {"t.yaml"});
  }
  const ChatTemplate custom = ChatTemplate::from_placeholder_text(
      "user: \"U:{content}\\n\"\nassistant: \"A:{content}{eos_token}\\n\"\n", "t.yaml", "", "</s>");
  CHECK(custom.render({{"user", "hi"}, {"assistant", "yo"}}, {false}) == "U:hi\nA:yo</s>\n");
}

// Text and JSONL documents -> token ids + loss masks: document splitting (paragraphs, whole file,
// separator lines), configurable JSONL fields, chat documents whose mask is true exactly on the
// response tokens, and one-line errors naming file and line. A byte-level tokenizer without merges
// (one token per byte) makes the expected ids readable; the Qwen2.5 tokenizer from shared data
// checks the chat boundary with real merges.
#include "catch.h"

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "data/text_dataset.h"
#include "io/error.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using namespace rqat::data;
using rqat::tokenizer::TokenId;
using rqat::tokenizer::Tokenizer;

constexpr TokenId kEndOfText = 256, kImStart = 257, kImEnd = 258;

std::shared_ptr<const Tokenizer> byte_tokenizer(const TempDir& dir) {
  return rqat::test::byte_level_test_tokenizer(dir);
}

std::vector<TokenId> bytes_of(std::string_view s) {
  std::vector<TokenId> ids;
  for (const char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::vector<uint8_t> ones(size_t n) { return std::vector<uint8_t>(n, 1); }

}  // namespace

TEST_CASE("plain text: paragraphs, whole file and separator lines") {
  TempDir dir("text_plain");
  auto tok = byte_tokenizer(dir);
  const std::string text = "First line\nsecond line\n\n \t\n\nPara two\r\n\nlast";
  write_bytes(dir / "a.txt", text);
  TextDataOptions options;
  options.path = dir / "a.txt";

  auto data = load_tokenized_dataset(options, *tok);
  CHECK(data.format == DataFormat::kPlainText);
  REQUIRE(data.documents.size() == 3);
  CHECK(data.documents[0].tokens == bytes_of("First line\nsecond line"));
  CHECK(data.documents[0].line == 1);
  CHECK(data.documents[1].tokens == bytes_of("Para two"));  // "\r\n" line ends are stripped
  CHECK(data.documents[1].line == 6);
  CHECK(data.documents[2].tokens == bytes_of("last"));
  CHECK(data.documents[2].line == 8);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(data.documents[i].index == i);
    CHECK(data.documents[i].loss_mask == ones(data.documents[i].tokens.size()));
  }
  CHECK(data.total_tokens == 22 + 8 + 4);
  CHECK(data.target_tokens == data.total_tokens);

  options.split = PlainTextSplit::kWholeFile;
  data = load_tokenized_dataset(options, *tok);
  REQUIRE(data.documents.size() == 1);
  CHECK(data.documents[0].tokens == bytes_of(text));

  // The TinyStories layout: stories ended by "<|endoftext|>" lines, blank lines around them.
  write_bytes(
      dir / "stories.txt",
      "\nOnce upon a time.\n\nThe end.\n<|endoftext|>\n\nA dog ran.\n  <|endoftext|>  \n\n");
  options.path = dir / "stories.txt";
  options.split = PlainTextSplit::kSeparatorLine;
  data = load_tokenized_dataset(options, *tok);
  REQUIRE(data.documents.size() == 2);
  CHECK(data.documents[0].tokens == bytes_of("Once upon a time.\n\nThe end."));
  CHECK(data.documents[0].line == 2);
  CHECK(data.documents[1].tokens == bytes_of("A dog ran."));
  CHECK(data.documents[1].line == 7);

  options.max_documents = 1;
  CHECK(load_tokenized_dataset(options, *tok).documents.size() == 1);
  options.max_documents.reset();
  options.append_eos = true;  // eos_token is <|im_end|>
  data = load_tokenized_dataset(options, *tok);
  auto expected = bytes_of("A dog ran.");
  expected.push_back(kImEnd);
  CHECK(data.documents[1].tokens == expected);
  CHECK(data.documents[1].loss_mask == ones(expected.size()));
}

TEST_CASE("JSONL: configurable text field, document index and line") {
  TempDir dir("text_jsonl");
  auto tok = byte_tokenizer(dir);
  write_bytes(
      dir / "d.jsonl",
      "{\"body\": \"alpha\", \"id\": 1}\n\n{\"body\": \"<|endoftext|>b\"}\n{\"body\": \"\"}\n");
  TextDataOptions options;
  options.path = dir / "d.jsonl";
  options.text_field = "body";
  const auto data = load_tokenized_dataset(options, *tok);
  CHECK(data.format == DataFormat::kJsonl);
  REQUIRE(data.documents.size() == 3);
  CHECK(data.documents[0].tokens == bytes_of("alpha"));
  CHECK(data.documents[0].line == 1);
  CHECK(data.documents[1].tokens == std::vector<TokenId>{kEndOfText, 'b'});  // special split out
  CHECK(data.documents[1].line == 3);
  CHECK(data.documents[1].index == 1);
  CHECK(data.documents[2].tokens.empty());  // kept: indices stay those of the file's records
  CHECK(data.documents[2].line == 4);

  // The extension decides the format unless it is given.
  write_bytes(dir / "d.txt", "{\"body\": \"x\"}\n");
  options.path = dir / "d.txt";
  CHECK(load_tokenized_dataset(options, *tok).documents[0].tokens == bytes_of("{\"body\": \"x\"}"));
  options.format = DataFormat::kJsonl;
  CHECK(load_tokenized_dataset(options, *tok).documents[0].tokens == bytes_of("x"));
}

TEST_CASE("bad data: one-line errors naming the file, line and field") {
  TempDir dir("text_errors");
  auto tok = byte_tokenizer(dir);
  TextDataOptions options;
  options.path = dir / "d.jsonl";
  const std::string file = options.path.string();

  write_bytes(options.path, "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"content\": \"no\"}\n");
  require_error([&] { load_tokenized_dataset(options, *tok); },
                {file + ":3:", "field 'text' missing", "content"});
  write_bytes(options.path, "{\"text\": \"ok\"}\n{\"text\": 5}\n");
  require_error([&] { load_tokenized_dataset(options, *tok); },
                {file + ":2:", "'text'", "not a string"});
  write_bytes(options.path, "{\"text\": \"ok\"}\n{\"text\": \"cut\n");
  require_error([&] { load_tokenized_dataset(options, *tok); }, {file + ":2:", "invalid JSON"});
  write_bytes(options.path, "[1, 2]\n");
  require_error([&] { load_tokenized_dataset(options, *tok); },
                {file + ":1:", "not a JSON object"});

  options.use_chat_template = true;
  const auto chat = rqat::chat::ChatTemplate::load(dir.path());
  write_bytes(options.path, "{\"prompt\": \"q\", \"response\": \"a\"}\n{\"prompt\": \"q\"}\n");
  require_error([&] { load_tokenized_dataset(options, *tok, &chat); },
                {file + ":2:", "field 'response' missing"});
  require_error([&] { load_tokenized_dataset(options, *tok); }, {file, "chat template"});

  options = {};
  options.path = dir / "bin.txt";
  write_bytes(options.path, std::string("text\nmore\x00junk", 14));
  require_error([&] { load_tokenized_dataset(options, *tok); },
                {options.path.string() + ":2:", "NUL byte", "not a text file"});
  options.use_chat_template = true;
  require_error([&] { load_tokenized_dataset(options, *tok, &chat); }, {"needs JSONL"});
  options = {};
  options.path = dir / "absent.txt";
  require_error([&] { load_tokenized_dataset(options, *tok); }, {"absent.txt", "not found"});
}

TEST_CASE("chat documents: the mask is true exactly on the response and end of turn") {
  TempDir dir("text_chat");
  auto tok = byte_tokenizer(dir);
  const auto chat = rqat::chat::ChatTemplate::load(dir.path());
  write_bytes(dir / "c.jsonl",
              json({{"q", "What is 2+2?"}, {"a", "<think>2+2=4</think> It is 4."}}).dump() + "\n" +
                  json({{"q", "Hi"}, {"a", ""}}).dump() + "\n");
  TextDataOptions options;
  options.path = dir / "c.jsonl";
  options.use_chat_template = true;
  options.prompt_field = "q";
  options.response_field = "a";
  options.system_prompt = "Be brief.";
  const auto data = load_tokenized_dataset(options, *tok, &chat);
  REQUIRE(data.documents.size() == 2);
  CHECK(data.chat_format == "chatml");

  // Expected ids written out by hand from the ChatML layout.
  auto expect_doc = [&](const TokenizedDocument& doc, const std::string& user,
                        const std::string& answer) {
    std::vector<TokenId> ids{kImStart};
    for (auto id : bytes_of("system\nBe brief.")) ids.push_back(id);
    ids.push_back(kImEnd);
    ids.push_back('\n');
    ids.push_back(kImStart);
    for (auto id : bytes_of("user\n" + user)) ids.push_back(id);
    ids.push_back(kImEnd);
    ids.push_back('\n');
    ids.push_back(kImStart);
    for (auto id : bytes_of("assistant\n")) ids.push_back(id);
    std::vector<uint8_t> mask(ids.size(), 0);
    for (auto id : bytes_of(answer)) ids.push_back(id);
    ids.push_back(kImEnd);
    ids.push_back('\n');
    mask.resize(ids.size(), 1);
    CHECK(doc.tokens == ids);
    CHECK(doc.loss_mask == mask);
  };
  expect_doc(data.documents[0], "What is 2+2?", "<think>2+2=4</think> It is 4.");
  expect_doc(data.documents[1], "Hi", "");
  int64_t masked = 0;
  for (const auto& d : data.documents)
    for (auto m : d.loss_mask) masked += m;
  CHECK(data.target_tokens == masked);
  CHECK(masked == static_cast<int64_t>(29 + 2 + 0 + 2));
}

TEST_CASE("chat documents with the Qwen2.5 tokenizer: prompt and response tokenized apart") {
  const auto qwen = rqat::test::shared_data_dir() / "tokenizers" / "qwen2.5";
  if (!std::filesystem::exists(qwen / "vocab.json")) {
    WARN("SKIPPED: " << qwen << " is absent");
    return;
  }
  auto tok = Tokenizer::load(qwen);
  const auto chat = rqat::chat::ChatTemplate::load(qwen);
  TempDir dir("text_chat_qwen");
  const std::string prompt = "Compute 12*12.", response = "12*12 = 144, so the answer is 144.";
  write_bytes(dir / "c.jsonl", json({{"prompt", prompt}, {"response", response}}).dump() + "\n");
  TextDataOptions options;
  options.path = dir / "c.jsonl";
  options.use_chat_template = true;
  const auto doc = load_tokenized_dataset(options, *tok, &chat).documents.at(0);
  // Qwen2.5's template inserts its default system prompt when none is given.
  const std::string rendered_prompt =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n<|im_start|>user\n" +
      prompt + "<|im_end|>\n<|im_start|>assistant\n";
  auto expected = tok->encode(rendered_prompt);
  const size_t prompt_tokens = expected.size();
  for (auto id : tok->encode(response + "<|im_end|>\n")) expected.push_back(id);
  CHECK(doc.tokens == expected);
  REQUIRE(doc.loss_mask.size() == expected.size());
  std::vector<TokenId> masked, unmasked;
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(doc.loss_mask[i] == (i >= prompt_tokens ? 1 : 0));
    (doc.loss_mask[i] ? masked : unmasked).push_back(doc.tokens[i]);
  }
  CHECK(tok->decode(masked) == response + "<|im_end|>\n");
  CHECK(tok->decode(unmasked) == rendered_prompt);
}

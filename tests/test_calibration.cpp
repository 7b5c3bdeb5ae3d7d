// Calibration sets: deterministic by seed, the record names exactly the tokens in the tensor
// (checked by re-tokenizing the recorded windows from the test's own copy of the documents), both
// sampling modes, the seq_len cap, and clear errors before any work. A byte-level tokenizer
// without merges (one token per byte) keeps document lengths exact.
#include "catch.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/error.h"
#include "quant/calibration.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using rqat::quant::build_calibration_set;
using rqat::quant::CalibrationOptions;
using rqat::quant::CalibrationSet;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using rqat::tokenizer::TokenId;
using rqat::tokenizer::Tokenizer;

// Token id = byte value (no merges).
std::shared_ptr<const Tokenizer> byte_tokenizer(const TempDir& dir) {
  return rqat::test::byte_level_test_tokenizer(dir);
}

// Random lowercase documents of the given lengths, written as JSONL {"text": ...} with a blank
// line after the first record (so record index and line differ). Returns the texts.
std::vector<std::string> write_documents(const std::filesystem::path& path,
                                         const std::vector<int>& lengths, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<std::string> texts;
  std::string file;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const auto letters = at::randint(0, 26, {lengths[i]}, gen, torch::kLong);
    std::string text;
    for (int64_t j = 0; j < lengths[i]; ++j)
      text += static_cast<char>('a' + letters[j].item<int64_t>());
    texts.push_back(text);
    file += json({{"text", text}}).dump() + "\n" + (i == 0 ? "\n" : "");
  }
  write_bytes(path, file);
  return texts;
}

size_t line_of(size_t index) { return index == 0 ? 1 : index + 2; }

// Rebuilds every sample from the record and the test's own texts and compares with the tensor.
void check_record_matches_tensor(const CalibrationSet& set, const std::vector<std::string>& texts,
                                 const Tokenizer& tok) {
  const auto& record = set.record;
  REQUIRE(record["samples"].size() == static_cast<size_t>(set.input_ids.size(0)));
  CHECK(record["fingerprint"] == rqat::quant::token_fingerprint(set.input_ids));
  for (size_t row = 0; row < record["samples"].size(); ++row) {
    std::vector<int64_t> rebuilt;
    int64_t previous_document = -1;
    for (const auto& seg : record["samples"][row]) {
      const auto doc = seg["document"].get<size_t>();
      REQUIRE(doc < texts.size());
      CHECK(seg["line"].get<size_t>() == line_of(doc));
      CHECK(static_cast<int64_t>(doc) > previous_document);
      previous_document = static_cast<int64_t>(doc);
      const auto ids = tok.encode(texts[doc]);
      const auto offset = seg["token_offset"].get<size_t>(), length = seg["length"].get<size_t>();
      REQUIRE(offset + length <= ids.size());
      rebuilt.insert(rebuilt.end(), ids.begin() + offset, ids.begin() + offset + length);
    }
    REQUIRE(rebuilt.size() == static_cast<size_t>(set.seq_len));
    CHECK(torch::equal(set.input_ids[row], torch::tensor(rebuilt, torch::kLong)));
  }
}

CalibrationOptions options_for(const std::filesystem::path& path, int64_t n, int64_t len,
                               uint64_t seed) {
  CalibrationOptions o;
  o.data.path = path;
  o.num_samples = n;
  o.seq_len = len;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("short documents: distinct chunks of the concatenated stream, deterministic by seed") {
  TempDir dir("calib_chunks");
  auto tok = byte_tokenizer(dir);
  const auto texts = write_documents(
      dir / "d.jsonl", {13, 40, 7, 0, 15, 31, 9, 14, 12, 11, 35, 5, 14, 13, 15, 12}, 7);
  const int64_t total = 246;  // 15 chunks of 16
  const auto a = build_calibration_set(options_for(dir / "d.jsonl", 10, 16, 1), *tok);
  // The documents of >= 16 tokens hold 40 + 31 + 35 = 106 < 10 x 16 tokens: too few for windows.
  CHECK(a.sampling == "chunks");
  CHECK(a.input_ids.sizes() == torch::IntArrayRef{10, 16});
  CHECK(a.input_ids.dtype() == torch::kLong);
  CHECK(a.source_tokens == total);
  CHECK(a.documents == 16);
  CHECK(a.record["sampling"] == "chunks");
  CHECK(a.record["seed"] == 1);
  CHECK(a.record["format"] == "jsonl");
  CHECK(a.record["fields"]["text"] == "text");
  check_record_matches_tensor(a, texts, *tok);

  // Chunks are distinct, aligned to multiples of seq_len in the stream, and spread over it.
  std::vector<int64_t> doc_start{0};
  for (const auto& t : texts)
    doc_start.push_back(doc_start.back() + static_cast<int64_t>(t.size()));
  std::set<int64_t> starts;
  for (const auto& sample : a.samples) {
    const int64_t start = doc_start[sample[0].document] + sample[0].token_offset;
    CHECK(start % 16 == 0);
    starts.insert(start);
  }
  CHECK(starts.size() == 10);

  const auto again = build_calibration_set(options_for(dir / "d.jsonl", 10, 16, 1), *tok);
  CHECK(torch::equal(a.input_ids, again.input_ids));
  CHECK(a.record == again.record);
  const auto other = build_calibration_set(options_for(dir / "d.jsonl", 10, 16, 2), *tok);
  CHECK_FALSE(torch::equal(a.input_ids, other.input_ids));
  CHECK(a.record["fingerprint"] != other.record["fingerprint"]);
  check_record_matches_tensor(other, texts, *tok);
}

TEST_CASE("long documents: distinct windows uniform over start positions") {
  TempDir dir("calib_windows");
  auto tok = byte_tokenizer(dir);
  // Two long documents (300 and 100 tokens) and short ones that are never used.
  const auto texts = write_documents(dir / "d.jsonl", {300, 12, 100, 20}, 11);
  auto options = options_for(dir / "d.jsonl", 8, 40, 5);
  const auto set = build_calibration_set(options, *tok);
  CHECK(set.sampling == "windows");
  check_record_matches_tensor(set, texts, *tok);
  std::set<std::pair<int64_t, int64_t>> windows;
  for (const auto& sample : set.samples) {
    REQUIRE(sample.size() == 1);
    CHECK((sample[0].document == 0 || sample[0].document == 2));
    CHECK(sample[0].length == 40);
    windows.insert({sample[0].document, sample[0].token_offset});
  }
  CHECK(windows.size() == 8);
  CHECK_FALSE(
      torch::equal(set.input_ids,
                   build_calibration_set(options_for(dir / "d.jsonl", 8, 40, 6), *tok).input_ids));

  // Uniform over window positions, not over documents: with seq_len 2 every document is long and
  // has length - 1 windows; 200 distinct draws out of 428 take about 200 x 299/428 = 140 from
  // document 0 (hypergeometric sd 4.7), where a uniform choice of document would take 50.
  options.num_samples = 200;
  options.seq_len = 2;
  const auto many = build_calibration_set(options, *tok);
  CHECK(many.sampling == "windows");
  int from_first = 0;
  for (const auto& sample : many.samples) from_first += sample[0].document == 0;
  const double expected = 200.0 * 299 / (299 + 99 + 11 + 19);  // every document is long now
  CHECK(std::abs(from_first - expected) < 25);
}

TEST_CASE("seq_len is capped at the model's positions; the record says both") {
  TempDir dir("calib_cap");
  auto tok = byte_tokenizer(dir);
  const auto texts = write_documents(dir / "d.jsonl", {100, 100}, 3);
  auto options = options_for(dir / "d.jsonl", 4, 2048, 0);
  options.max_positions = 32;
  const auto set = build_calibration_set(options, *tok);
  CHECK(set.seq_len == 32);
  CHECK(set.input_ids.size(1) == 32);
  CHECK(set.record["seq_len"] == 32);
  CHECK(set.record["seq_len_requested"] == 2048);
  check_record_matches_tensor(set, texts, *tok);
}

TEST_CASE("plain text with separator lines, recorded with the split mode") {
  TempDir dir("calib_text");
  auto tok = byte_tokenizer(dir);
  write_bytes(dir / "s.txt", "abcdefgh\n<|endoftext|>\nijklmnop\nqr\n<|endoftext|>\n");
  auto options = options_for(dir / "s.txt", 2, 9, 0);
  options.data.split = rqat::data::PlainTextSplit::kSeparatorLine;
  const auto set = build_calibration_set(options, *tok);
  CHECK(set.record["format"] == "text");
  CHECK(set.record["split"] == "separator");
  CHECK(set.record["separator_line"] == "<|endoftext|>");
  // 8 + 11 = 19 tokens: chunks [0, 9) and [9, 18) in some order; the first spans both documents.
  CHECK(set.sampling == "chunks");
  const std::string stream = "abcdefghijklmnop\nqr";
  std::set<std::string> rows;
  for (int64_t r = 0; r < 2; ++r) {
    std::string row;
    for (int64_t t = 0; t < 9; ++t) row += static_cast<char>(set.input_ids[r][t].item<int64_t>());
    rows.insert(row);
  }
  CHECK(rows == std::set<std::string>{stream.substr(0, 9), stream.substr(9, 9)});
  for (const auto& sample : set.samples) {
    if (sample[0].token_offset == 0 && sample[0].document == 0) {
      REQUIRE(sample.size() == 2);
      CHECK(sample[1].document == 1);
      CHECK(sample[1].line == 3);
      CHECK(sample[1].token_offset == 0);
      CHECK(sample[1].length == 1);
    }
  }
}

TEST_CASE("bad calibration data or options: clear errors") {
  TempDir dir("calib_errors");
  auto tok = byte_tokenizer(dir);
  const auto path = dir / "d.jsonl";
  write_documents(path, {50, 50}, 1);
  require_error([&] { build_calibration_set(options_for(path, 7, 16, 0), *tok); },
                {path.string(), "not enough calibration data", "2 documents hold 100 tokens",
                 "7 samples x 16 tokens need 112"});
  require_error([&] { build_calibration_set(options_for(path, 0, 16, 0), *tok); }, {"num_samples"});
  require_error([&] { build_calibration_set(options_for(path, 2, 1, 0), *tok); }, {"seq_len"});

  write_bytes(path, "{\"text\": \"aaaa\"}\n{\"text\": \"bb\"\n");
  require_error([&] { build_calibration_set(options_for(path, 1, 2, 0), *tok); },
                {path.string() + ":2:", "invalid JSON"});
  write_bytes(path, "{\"text\": \"aaaa\"}\n\n{\"prompt\": \"bb\"}\n");
  require_error([&] { build_calibration_set(options_for(path, 1, 2, 0), *tok); },
                {path.string() + ":3:", "field 'text' missing"});
}

TEST_CASE("TinyStories sample with the Qwen2.5 tokenizer: the record re-tokenizes to the tensor") {
  const auto data = rqat::test::shared_data_dir();
  const auto qwen = data / "tokenizers" / "qwen2.5",
             stories = data / "tinyllama" / "tinystories_sample.txt";
  if (!std::filesystem::exists(qwen / "vocab.json") || !std::filesystem::exists(stories)) {
    WARN("SKIPPED: shared data (qwen2.5 tokenizer, tinystories sample) is absent");
    return;
  }
  auto tok = Tokenizer::load(qwen);
  auto options = options_for(stories, 6, 64, 3);
  options.data.split = rqat::data::PlainTextSplit::kSeparatorLine;
  const auto set = build_calibration_set(options, *tok);

  // The test's own split of the file: stories between "<|endoftext|>" lines, trimmed of blank
  // lines.
  std::ifstream in(stories);
  std::vector<std::string> texts;
  std::string line, current;
  auto flush = [&] {
    while (!current.empty() && current.back() == '\n') current.pop_back();
    if (!current.empty()) texts.push_back(current);
    current.clear();
  };
  while (std::getline(in, line)) {
    if (line == "<|endoftext|>") {
      flush();
    } else if (!current.empty() || !line.empty()) {
      current += line + "\n";
    }
  }
  flush();
  REQUIRE(set.documents == static_cast<int64_t>(texts.size()));
  for (size_t row = 0; row < set.samples.size(); ++row) {
    std::vector<int64_t> rebuilt;
    for (const auto& seg : set.samples[row]) {
      const auto ids = tok->encode(texts.at(seg.document));
      rebuilt.insert(rebuilt.end(), ids.begin() + seg.token_offset,
                     ids.begin() + seg.token_offset + seg.length);
    }
    CHECK(torch::equal(set.input_ids[row], torch::tensor(rebuilt, torch::kLong)));
  }
  INFO("sampling " << set.sampling << ", " << set.source_tokens << " tokens");
  CHECK(set.source_tokens > 6 * 64);
}

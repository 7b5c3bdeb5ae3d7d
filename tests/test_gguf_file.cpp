// The GGUF v3 container (io/gguf_file.h): what the writer puts down the reader gives back (every
// value type, tensor shapes in PyTorch order, bytes), the layout llama.cpp insists on (magic,
// version, offsets exactly sequential and each tensor on the alignment, the data section padded),
// and one-line errors for bad tensors, repeated keys and truncated or foreign files.
#include <cstring>
#include <fstream>

#include "io/gguf_file.h"
#include "test_util.h"

using namespace rqat;
using io::GgufType;

namespace {

io::GgufTensor tensor(std::string name, std::vector<int64_t> shape, GgufType type, char fill) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  const int64_t bytes = io::gguf_tensor_bytes(type, shape.back(), rows, name);
  return {std::move(name), std::move(shape), type, std::string(static_cast<size_t>(bytes), fill)};
}

template <class T>
T read_at(const std::string& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

}  // namespace

TEST_CASE("GGUF files read back as written, laid out as llama.cpp reads them", "[gguf]") {
  test::TempDir dir("gguf_file");
  io::GgufWriter w;
  w.add("general.architecture", std::string("qwen3"));
  w.add("qwen3.block_count", uint32_t{28});
  w.add("some.int", int32_t{-5});
  w.add("some.u64", uint64_t{1} << 40);
  w.add("qwen3.rope.freq_base", 1e6f);
  w.add("tokenizer.ggml.add_bos_token", false);
  const std::string space_b = "\u0120b";  // "Ġb": GPT-2's byte-level space, then b
  w.add("tokenizer.ggml.tokens", std::vector<std::string>{"a", space_b, "<|im_end|>"});
  w.add("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 3});
  w.add("some.floats", std::vector<float>{0.5f, -2.0f});
  w.add_tensor(tensor("token_embd.weight", {3, 64}, GgufType::kQ8_0, '\x11'));
  w.add_tensor(tensor("output_norm.weight", {7}, GgufType::kF32, '\x22'));
  w.add_tensor(tensor("blk.0.ffn_up.weight", {2, 256}, GgufType::kQ4_K, '\x33'));
  const auto path = dir / "m.gguf";
  w.write(path);

  const io::GgufContents c = io::read_gguf(path);
  CHECK(c.version == 3);
  REQUIRE(c.metadata.size() == 9);
  CHECK(std::get<std::string>(*c.find("general.architecture")) == "qwen3");
  CHECK(std::get<uint32_t>(*c.find("qwen3.block_count")) == 28);
  CHECK(std::get<int32_t>(*c.find("some.int")) == -5);
  CHECK(std::get<uint64_t>(*c.find("some.u64")) == uint64_t{1} << 40);
  CHECK(std::get<float>(*c.find("qwen3.rope.freq_base")) == 1e6f);
  CHECK(std::get<bool>(*c.find("tokenizer.ggml.add_bos_token")) == false);
  CHECK(std::get<std::vector<std::string>>(*c.find("tokenizer.ggml.tokens"))[1] == space_b);
  CHECK(std::get<std::vector<int32_t>>(*c.find("tokenizer.ggml.token_type"))[2] == 3);
  CHECK(std::get<std::vector<float>>(*c.find("some.floats"))[1] == -2.0f);
  CHECK(c.find("absent") == nullptr);
  REQUIRE(c.tensors.size() == 3);
  CHECK(c.tensors[0].shape == std::vector<int64_t>{3, 64});
  CHECK(c.tensors[0].type == GgufType::kQ8_0);
  CHECK(c.tensors[0].data == std::string(3 * 2 * 34, '\x11'));
  CHECK(c.tensors[1].data == std::string(7 * 4, '\x22'));
  CHECK(c.tensors[2].data == std::string(2 * 144, '\x33'));

  // The raw layout: magic, version, counts; the first tensor's dims innermost first; offsets 0,
  // then each previous size rounded up to 32; the file a multiple of 32 long.
  const std::string bytes = test::read_bytes(path);
  CHECK(bytes.substr(0, 4) == "GGUF");
  CHECK(read_at<uint32_t>(bytes, 4) == 3);
  CHECK(read_at<uint64_t>(bytes, 8) == 3);
  CHECK(read_at<uint64_t>(bytes, 16) == 9);
  const size_t name_at = bytes.find("token_embd.weight");
  REQUIRE(name_at != std::string::npos);
  size_t at = name_at + std::strlen("token_embd.weight");
  CHECK(read_at<uint32_t>(bytes, at) == 2);
  CHECK(read_at<uint64_t>(bytes, at + 4) == 64);  // ne[0]: the row
  CHECK(read_at<uint64_t>(bytes, at + 12) == 3);
  CHECK(read_at<uint32_t>(bytes, at + 20) == 8);  // ggml's Q8_0
  CHECK(read_at<uint64_t>(bytes, at + 24) == 0);
  at = bytes.find("output_norm.weight") + std::strlen("output_norm.weight");
  CHECK(read_at<uint64_t>(bytes, at + 4 + 8 + 4) == 224);  // 204 bytes of q8_0, padded to 32
  CHECK(bytes.size() % 32 == 0);
}

TEST_CASE("GGUF writer and reader refuse what llama.cpp could not read", "[gguf]") {
  test::TempDir dir("gguf_file_errors");
  io::GgufWriter w;
  w.add("a", uint32_t{1});
  test::require_error([&] { w.add("a", uint32_t{2}); }, {"a", "twice"});
  test::require_error(
      [&] {
        w.add_tensor(tensor("x", {2, 100}, GgufType::kF16, 0));
        w.add_tensor({"y", {2, 100}, GgufType::kQ4_0, ""});
      },
      {"y", "100", "q4_0", "32"});
  test::require_error([&] { w.add_tensor({"z", {4}, GgufType::kF32, "abc"}); }, {"z", "3 bytes"});
  test::require_error(
      [&] {
        w.add_tensor(tensor("x", {1, 8}, GgufType::kF16, 0));
      },
      {"x", "twice"});

  const auto path = dir / "t.gguf";
  w.write(path);
  std::string bytes = test::read_bytes(path);
  test::write_bytes(dir / "cut.gguf", bytes.substr(0, bytes.size() / 2));
  test::require_error([&] { io::read_gguf(dir / "cut.gguf"); }, {"cut.gguf"});
  test::write_bytes(dir / "foreign.gguf", "PK\x03\x04 not a gguf file at all");
  test::require_error([&] { io::read_gguf(dir / "foreign.gguf"); }, {"foreign.gguf", "GGUF"});
  bytes[4] = 2;  // version 2
  test::write_bytes(dir / "v2.gguf", bytes);
  test::require_error([&] { io::read_gguf(dir / "v2.gguf"); }, {"v2.gguf", "version 2"});
}

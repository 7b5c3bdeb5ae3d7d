// safetensors reader/writer: round trips of every dtype, zero-copy mapping, and one-line errors for
// corrupt or truncated files (each names the file and, where there is one, the tensor).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

#include "io/safetensors.h"
#include "test_util.h"

using rqat::io::SafetensorsFile;
using rqat::test::require_error;
using rqat::test::TempDir;

namespace {

// Builds a raw safetensors file from a header text and a data section, for corruption tests.
std::string raw_file(const std::string& header, const std::string& data,
                     int64_t declared_len = -1) {
  uint64_t len = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + header + data;
}

}  // namespace

TEST_CASE("safetensors round-trips every supported dtype") {
  TempDir dir("st_roundtrip");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  rqat::io::NamedTensors tensors{
      {"f32", at::randn({3, 5}, gen)},
      {"bf16", at::randn({4, 7}, gen).to(at::kBFloat16)},
      {"f16", at::randn({2, 3, 4}, gen).to(at::kHalf)},
      {"i32", at::randint(-1000, 1000, {9}, gen, at::kInt)},
      {"i8",
       at::randint(-128, 127, {5}, gen, at::kChar)},  // odd size: the next tensor is misaligned
      {"i64", at::randint(-5, 5, {3}, gen, at::kLong)},
      {"u8", at::randint(0, 255, {6}, gen, at::kByte)},
      {"bool", at::randint(0, 2, {4}, gen, at::kLong).to(at::kBool)},
      {"scalar", at::tensor(3.5f).reshape({})},
      {"empty", at::empty({0, 4})},
      {"transposed", at::randn({3, 4}, gen).t()},  // non-contiguous input is stored contiguous
  };
  rqat::io::save_safetensors(dir / "t.safetensors", tensors, {{"format", "pt"}, {"note", "x"}});
  auto file = SafetensorsFile::open(dir / "t.safetensors");
  CHECK(file->metadata().at("format") == "pt");
  CHECK(file->entries().size() == tensors.size());
  for (const auto& [name, expected] : tensors) {
    INFO(name);
    auto got = file->tensor(name);
    CHECK(got.scalar_type() == expected.scalar_type());
    CHECK(got.sizes() == expected.sizes());
    CHECK(at::equal(got, expected.contiguous()));
  }
}

TEST_CASE("safetensors tensors alias the mapped file instead of copying it") {
  TempDir dir("st_alias");
  auto w = at::randn({64, 32}).to(at::kBFloat16);
  rqat::io::save_safetensors(dir / "w.safetensors", {{"w", w}});
  auto file = SafetensorsFile::open(dir / "w.safetensors");
  auto a = file->tensor("w");
  auto b = file->tensor("w");
  CHECK(a.data_ptr() == b.data_ptr());  // a copy would give distinct buffers
  // Writing is copy-on-write: the file on disk keeps its bytes.
  a.fill_(0);
  CHECK(at::equal(SafetensorsFile::open(dir / "w.safetensors")->tensor("w"), w));
  // The mapping outlives the file object while a tensor refers to it.
  auto kept = SafetensorsFile::open(dir / "w.safetensors")->tensor("w");
  CHECK(at::equal(kept, w));
}

TEST_CASE("python-written safetensors header padding and the 8-byte alignment of our writer") {
  TempDir dir("st_align");
  rqat::io::save_safetensors(dir / "a.safetensors", {{"x", at::ones({3})}});
  auto bytes = rqat::test::read_bytes(dir / "a.safetensors");
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  CHECK(len % 8 == 0);
  CHECK(bytes.size() == 8 + len + 12);
}

TEST_CASE("corrupt safetensors files give one-line errors naming file and tensor") {
  TempDir dir("st_corrupt");
  const auto path = dir / "bad.safetensors";
  const std::string file = path.filename().string();
  auto check = [&](const std::string& bytes, std::initializer_list<std::string> needles) {
    rqat::test::write_bytes(path, bytes);
    require_error([&] { SafetensorsFile::open(path); }, needles);
  };
  const std::string four_floats(16, '\0');

  SECTION("shorter than the length field") { check("abc", {file, "truncated"}); }
  SECTION("header length beyond the file") {
    check(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "", 4000),
          {file, "truncated"});
  }
  SECTION("absurd header length") {
    check(raw_file("{}", "", int64_t{1} << 40), {file, "header length"});
  }
  SECTION("header is not JSON") {
    check(raw_file("{not json", four_floats), {file, "invalid JSON"});
  }
  SECTION("header is not an object") { check(raw_file("[1,2]", ""), {file, "not a JSON object"}); }
  SECTION("unknown dtype") {
    check(raw_file(R"({"w":{"dtype":"F7","shape":[4],"data_offsets":[0,16]}})", four_floats),
          {file, "'w'", "F7"});
  }
  SECTION("missing dtype") {
    check(raw_file(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", four_floats),
          {file, "'w'", "dtype"});
  }
  SECTION("negative dimension") {
    check(raw_file(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four_floats),
          {file, "'w'", "shape"});
  }
  SECTION("offsets past the end (truncated data)") {
    check(raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                   four_floats.substr(0, 10)),
          {file, "'w'", "past the end"});
  }
  SECTION("dtype x shape disagrees with the byte count") {
    check(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four_floats),
          {file, "'w'", "needs 12"});
  }
  SECTION("a shape whose byte count wraps around 2^64") {
    // (2^61 + 1) x 8 bytes = 2^64 + 8 = 8 modulo 2^64: it must not pass as an 8-byte tensor.
    const std::string eight(8, '\0');
    check(raw_file(R"({"w":{"dtype":"I64","shape":[2305843009213693953,1],"data_offsets":[0,8]}})",
                   eight),
          {file, "'w'", "overflows"});
    check(
        raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,1073741824,4],"data_offsets":[0,16]}})",
                 four_floats),
        {file, "'w'", "overflows"});
  }
  SECTION("bad data_offsets") {
    check(raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16]}})", four_floats),
          {file, "'w'", "data_offsets"});
  }
  SECTION("overlapping tensors") {
    check(
        raw_file(
            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            four_floats),
        {file, "overlaps"});
  }
  SECTION("hole between tensors") {
    check(
        raw_file(
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
            four_floats),
        {file, "'b'", "belong to no tensor"});
  }
  SECTION("trailing bytes") {
    check(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four_floats),
          {file, "trailing"});
  }
  SECTION("metadata that is not strings") {
    check(raw_file(R"({"__metadata__":{"format":3}})", ""), {file, "__metadata__"});
  }
  SECTION("missing file") {
    require_error([&] { SafetensorsFile::open(dir / "nope.safetensors"); },
                  {"nope.safetensors", "cannot open"});
  }
}

TEST_CASE("a truncated copy of a real file is rejected") {
  TempDir dir("st_trunc");
  rqat::io::save_safetensors(dir / "full.safetensors",
                             {{"a", at::randn({10, 10})}, {"b", at::randn({5})}});
  const auto bytes = rqat::test::read_bytes(dir / "full.safetensors");
  for (size_t cut : {size_t{4}, size_t{20}, bytes.size() - 1, bytes.size() - 30}) {
    INFO("cut at " << cut);
    rqat::test::write_bytes(dir / "cut.safetensors", bytes.substr(0, cut));
    require_error([&] { SafetensorsFile::open(dir / "cut.safetensors"); }, {"cut.safetensors"});
  }
}

TEST_CASE("asking for a tensor that is not there names it") {
  TempDir dir("st_missing");
  rqat::io::save_safetensors(dir / "a.safetensors", {{"x", at::ones({2})}});
  auto file = SafetensorsFile::open(dir / "a.safetensors");
  require_error([&] { file->tensor("y"); }, {"a.safetensors", "'y'"});
}

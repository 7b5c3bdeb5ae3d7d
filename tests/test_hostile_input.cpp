// Hostile files become one-line errors, not crashes (issue 18, docs/reliability.md): JSON nested
// 10^5 levels deep in every reader (a file, a JSONL line, a safetensors header), generated here
// rather than stored; the nesting limit counts brackets outside strings only and lets ordinary
// depth through.
#include "catch.h"

#include <string>

#include "io/json_file.h"
#include "io/jsonl.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace {

using namespace rqat;
using rqat::test::require_error;
using rqat::test::TempDir;

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::string nested_objects(size_t depth) {
  std::string out;
  for (size_t i = 0; i < depth; ++i) out += "{\"a\":";
  out += "1";
  out += std::string(depth, '}');
  return out;
}

}  // namespace

TEST_CASE("JSON nesting: 10^5 levels are refused before parsing, by every reader") {
  TempDir dir("hostile_json");
  const size_t deep = 100000;

  const auto config = dir / "config.json";
  rqat::test::write_bytes(config, "{\"layers\": " + nested_arrays(deep) + "}");
  require_error([&] { io::read_json_file(config); }, {"config.json", "nested deeper than 512"});
  rqat::test::write_bytes(config, nested_objects(deep));
  require_error([&] { io::read_unordered_json_file(config); },
                {"config.json", "nested deeper than 512"});

  const auto jsonl = dir / "samples.jsonl";
  rqat::test::write_bytes(jsonl, "{\"a\": 1}\n{\"b\": " + nested_arrays(deep) + "}\n");
  require_error([&] { io::for_each_jsonl_object<nlohmann::json>(jsonl, [](auto&, size_t) {}); },
                {"samples.jsonl:2", "nested deeper"});

  // A safetensors header: 8-byte little-endian length, then the JSON.
  const std::string header = "{\"__metadata__\": " + nested_objects(deep) + "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const auto weights = dir / "model.safetensors";
  rqat::test::write_bytes(weights, bytes + header);
  require_error([&] { io::SafetensorsFile::open(weights); },
                {"model.safetensors header", "nested deeper"});
}

TEST_CASE("JSON nesting: ordinary depth passes; brackets inside strings do not count") {
  CHECK_NOTHROW(io::check_json_nesting(nested_arrays(io::kMaxJsonDepth), "ok.json"));
  require_error([] { io::check_json_nesting(nested_arrays(io::kMaxJsonDepth + 1), "x.json"); },
                {"x.json", "at byte 512"});
  // 10^5 brackets in a string, and an escaped quote that must not end it.
  const std::string text = "{\"s\": \"\\\"" + std::string(100000, '[') + "\", \"t\": [[1]]}";
  CHECK_NOTHROW(io::check_json_nesting(text, "strings.json"));
  CHECK(nlohmann::json::parse(text)["t"][0][0] == 1);
}

// io::Artifact: a directory's small files read once, errors naming the file; and no other source
// of lib/ reads them (one reader per file).
#include <fmt/format.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "chat/chat_template.h"
#include "io/artifact.h"
#include "io/manifest.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace rqat;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;

TEST_CASE("Artifact::open reads every part of a model directory once") {
  TempDir tmp("artifact");
  const auto dir = test::write_byte_level_model(tmp);
  io::write_manifest(dir, {.tool = "ptq", .args = {"ptq"}});
  write_bytes(dir / "special_tokens_map.json", R"({"pad_token": "<|endoftext|>"})");

  const io::Artifact a = io::Artifact::open(dir);
  CHECK(a.dir == dir);
  CHECK(a.config.at("model_type") == "qwen3");
  CHECK(a.generation_config.at("eos_token_id") == 258);
  CHECK(a.tokenizer_config.is_object());
  CHECK(a.special_tokens_map.at("pad_token") == "<|endoftext|>");
  CHECK(a.manifest.at("tool") == "ptq");
  CHECK(&a.require_manifest() == &a.manifest);
  CHECK(a.has("tokenizer.json"));
  CHECK(a.has("model.safetensors"));
  CHECK_FALSE(a.has("vocab.json"));
  CHECK(a.where(io::kConfigFile) == (dir / "config.json").string());

  // What the layers above make of it, with no further reads of these files.
  const auto config = model::ModelConfig::from_artifact(a);
  CHECK(config.vocab_size == 260);
  CHECK(config.generation == a.generation_config);
  const auto tok = tokenizer::Tokenizer::load(a);
  CHECK(tok->config().pad_token == "<|endoftext|>");
  const auto chat = chat::ChatTemplate::load(a);
  CHECK(chat.render({{"user", "hi"}}, {true, true}).find("<|im_start|>user") != std::string::npos);
  const auto loaded = quant::load_model(a);
  CHECK(loaded->config().vocab_size == 260);
  // The path versions open the same artifact.
  CHECK(model::load_causal_lm(dir)->config().generation == a.generation_config);
  CHECK(io::read_manifest(dir) == a.manifest);
}

TEST_CASE("Artifact::open: missing or malformed files are one-line errors naming the file") {
  TempDir tmp("artifact_errors");
  require_error([&] { io::Artifact::open(tmp / "absent"); },
                {"absent", "model directory does not exist"});
  require_error([&] { io::Artifact::open(tmp.path()); }, {"config.json", "cannot open"});
  // A tokenizer's directory needs no config.json; nothing there is fine too.
  CHECK(io::Artifact::open_any(tmp.path()).config.is_null());
  CHECK(io::Artifact::open_any(tmp / "absent").files.empty());
  require_error([&] { io::Artifact::open_any(tmp.path()).require_manifest(); },
                {"manifest.json", "no manifest.json"});

  const auto dir = test::write_byte_level_model(tmp);
  struct Case {
    const char* file;
    const char* text;
  };
  for (const Case& c :
       {Case{"config.json", R"({"model_type": )"}, Case{"generation_config.json", "{,}"},
        Case{"tokenizer_config.json", R"({"bos_token": [})"}, Case{"special_tokens_map.json", "[1"},
        Case{"manifest.json", "nope"}}) {
    CAPTURE(c.file);
    const bool existed = std::filesystem::exists(dir / c.file);
    const std::string kept = existed ? test::read_bytes(dir / c.file) : "";
    write_bytes(dir / c.file, c.text);
    require_error([&] { io::Artifact::open(dir); }, {(dir / c.file).string(), "invalid JSON"});
    if (std::string(c.file) != "config.json")
      require_error([&] { io::Artifact::open_any(dir); }, {c.file, "invalid JSON"});
    if (existed)
      write_bytes(dir / c.file, kept);
    else
      std::filesystem::remove(dir / c.file);
  }
  // Field checks of the layers above still name the file and the field.
  write_bytes(dir / "tokenizer_config.json", R"({"add_bos_token": "yes"})");
  require_error([&] { tokenizer::Tokenizer::load(io::Artifact::open(dir)); },
                {"tokenizer_config.json", "add_bos_token"});
  write_bytes(dir / "config.json", R"({"model_type": "qwen3"})");
  require_error([&] { model::ModelConfig::from_artifact(io::Artifact::open(dir)); },
                {"config.json", "'vocab_size'", "missing"});
}

namespace {

// The files whose parsing belongs to io::Artifact alone.
const char* const kArtifactFiles[] = {"config.json",           "generation_config.json",
                                      "tokenizer_config.json", "special_tokens_map.json",
                                      "chat_template.jinja",   "manifest.json"};

}  // namespace

// One reader per artifact file: outside lib/io/artifact.*, a source of lib/ may name these files
// in a path (DIR / "config.json", DIR / io::kConfigFile) only to write, copy, remove or stat one,
// or in an error message ((DIR / ...).string()); a path kept for reading, or a read, fails here.
TEST_CASE("lib/: only io::Artifact reads an artifact's files") {
  const std::filesystem::path root = std::filesystem::path(__FILE__).parent_path().parent_path();
  if (!std::filesystem::exists(root / "lib" / "io" / "artifact.cpp")) {
    WARN("SKIPPED: the source tree is not at " << root);
    return;
  }
  std::string names;
  for (const char* name : kArtifactFiles) {
    if (!names.empty()) names += "|";
    names += std::regex_replace(std::string(name), std::regex(R"(\.)"), R"(\.)");
  }
  // DIR / "name" or DIR / io::kNameFile; the calls that may take such a path; the readers.
  const std::regex join(
      R"re(/\s*("(?:)re" + names +
      R"re()"|io::k(?:Config|GenerationConfig|TokenizerConfig|SpecialTokensMap|ChatTemplate|Manifest)File))re");
  const std::regex allowed(
      R"re((?:write_json_file|write_text_atomically|write_bytes|copy_file|remove|exists|is_regular_file|last_write_time)\s*\(|\)\.string\(\))re");
  const std::regex reader(
      R"re((?:read_json_file|read_unordered_json_file|json_fields::read|read_text|ModelConfig::load|ifstream)\b[^;]*"(?:)re" +
      names + R"re()")re");
  int checked = 0;
  std::vector<std::string> offending;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "lib")) {
    const auto ext = entry.path().extension();
    if (ext != ".cpp" && ext != ".h") continue;
    if (entry.path().parent_path().filename() == "io" && entry.path().stem() == "artifact")
      continue;
    ++checked;
    std::ifstream in(entry.path());
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const bool joined = std::regex_search(line, join) && !std::regex_search(line, allowed);
      if (joined || std::regex_search(line, reader))
        offending.push_back(
            fmt::format("{}:{}: {}", entry.path().lexically_relative(root).string(), number, line));
    }
  }
  CHECK(checked > 100);
  for (const auto& line : offending) UNSCOPED_INFO(line);
  CHECK(offending.empty());

  // The check itself sees what it must refuse.
  CHECK(std::regex_search(R"(const auto p = dir / "tokenizer_config.json";)", join));
  CHECK(std::regex_search(R"(io::read_json_file(dir / "config.json"))", reader));
  CHECK(std::regex_search(R"(read_json_file(dir / io::kManifestFile))", join));
  CHECK_FALSE(std::regex_search(R"(io::write_json_file(dir / io::kConfigFile, j);)", reader));
  CHECK(std::regex_search(R"(io::write_json_file(dir / io::kConfigFile, j);)", allowed));
}

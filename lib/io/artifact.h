// An artifact directory (a Hugging Face model, an rqat stage's output, a tokenizer's directory)
// opened once: each of the small files rqat reads from it (config.json, generation_config.json,
// tokenizer_config.json, special_tokens_map.json, chat_template.jinja, manifest.json) is read and
// parsed here and nowhere else, with one-line errors naming the file; the layers above interpret
// the parsed values (model::ModelConfig, the tokenizer, the chat template, GPTQ's metadata) and
// tools pass the Artifact down instead of the path. Large files stay with their readers: weights
// (io::CheckpointReader), tokenizer.json and the legacy vocabularies (the tokenizer), the quantized
// state (quant::load_quant_state); the Artifact says which of them exist.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/json_file.h"

namespace rqat::io {

// The names of the files an Artifact reads (writers spell them through these too).
inline constexpr std::string_view kConfigFile = "config.json";
inline constexpr std::string_view kGenerationConfigFile = "generation_config.json";
inline constexpr std::string_view kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr std::string_view kSpecialTokensMapFile = "special_tokens_map.json";
inline constexpr std::string_view kChatTemplateFile = "chat_template.jinja";
inline constexpr std::string_view kManifestFile = "manifest.json";

struct Artifact {
  std::filesystem::path dir;
  Json config;              // config.json; null when absent (open() requires it)
  Json generation_config;   // generation_config.json; null when absent
  Json tokenizer_config;    // tokenizer_config.json; null when absent ({} when the file is empty)
  Json special_tokens_map;  // special_tokens_map.json; null when absent
  std::optional<std::string> chat_template;  // chat_template.jinja's text
  Json manifest;                             // manifest.json; null when absent
  std::vector<std::string> files;            // the names of dir's regular files, sorted

  // A model directory: "DIR: model directory does not exist" when it is none, and config.json is
  // required ("DIR/config.json: cannot open (missing or unreadable)").
  static Artifact open(const std::filesystem::path& dir);
  // Any directory (a tokenizer's, a stage's output not written yet): every file optional, a
  // missing directory gives an Artifact with nothing in it. Files present must parse.
  static Artifact open_any(const std::filesystem::path& dir);

  bool has(std::string_view name) const;  // a regular file `name` in dir
  std::filesystem::path path(std::string_view name) const { return dir / name; }
  std::string where(std::string_view name) const { return path(name).string(); }  // for errors

  // manifest.json, "DIR/manifest.json: no manifest.json in this directory" when absent.
  const Json& require_manifest() const;
};

}  // namespace rqat::io

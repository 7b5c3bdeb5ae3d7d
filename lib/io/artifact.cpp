// See artifact.h. The one place the small JSON files of an artifact directory are parsed
// (tests/test_artifact.cpp checks that no other source reads them).
#include "io/artifact.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "io/error.h"
#include "io/json_text.h"
#include "io/manifest.h"

namespace rqat::io {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Json parse_text(std::string_view text, const fs::path& path) {
  Json json;
  if (auto problem = parse_json_into(text, json)) fail("{}: {}", path.string(), *problem);
  return json;
}

// dir/name parsed; null when absent. `empty_is_object`: tokenizer_config.json holding nothing
// reads as {} (as transformers tolerates).
Json read_optional(const Artifact& a, std::string_view name, bool empty_is_object = false) {
  if (!a.has(name)) return nullptr;
  const std::string text = read_text(a.path(name));
  if (empty_is_object && text.empty()) return Json::object();
  return parse_text(text, a.path(name));
}

std::vector<std::string> regular_files(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return names;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    std::error_code type_error;
    if (entry.is_regular_file(type_error)) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Artifact read_files(const fs::path& dir, bool config_required) {
  Artifact a;
  a.dir = dir;
  a.files = regular_files(dir);
  if (config_required && !a.has(kConfigFile)) read_text(a.path(kConfigFile));  // its error
  a.config = read_optional(a, kConfigFile);
  a.generation_config = read_optional(a, kGenerationConfigFile);
  a.tokenizer_config = read_optional(a, kTokenizerConfigFile, /*empty_is_object=*/true);
  a.special_tokens_map = read_optional(a, kSpecialTokensMapFile);
  if (a.has(kChatTemplateFile)) a.chat_template = read_text(a.path(kChatTemplateFile));
  a.manifest = read_optional(a, kManifestFile);
  return a;
}

}  // namespace

Artifact Artifact::open(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail("{}: model directory does not exist", dir.string());
  return read_files(dir, /*config_required=*/true);
}

Artifact Artifact::open_any(const fs::path& dir) {
  return read_files(dir, /*config_required=*/false);
}

bool Artifact::has(std::string_view name) const {
  return std::binary_search(files.begin(), files.end(), name);
}

const Json& Artifact::require_manifest() const {
  if (manifest.is_null()) fail("{}: no manifest.json in this directory", where(kManifestFile));
  return manifest;
}

// manifest.h's readers: the manifest alone (run tables read many stages' manifests).
Json read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestFile;
  if (!fs::exists(path)) fail("{}: no manifest.json in this directory", path.string());
  return parse_text(read_text(path), path);
}

Json read_manifest_or_null(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_regular_file(dir / kManifestFile, error)) return nullptr;
  try {
    return read_manifest(dir);
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace rqat::io

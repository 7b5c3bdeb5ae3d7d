#include "io/manifest.h"

#include <fmt/chrono.h>

#include <chrono>

#include "io/artifact.h"
#include "io/atomic_file.h"
#include "io/error.h"

namespace rqat::io {

namespace {
std::vector<std::string>& stored_args() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

void set_process_args(int argc, const char* const* argv) {
  stored_args().assign(argv, argv + argc);
}

const std::vector<std::string>& process_args() { return stored_args(); }

void write_manifest(const std::filesystem::path& dir, const Manifest& manifest) {
  Json json = Json::object();
  json["tool"] = manifest.tool;
  json["args"] = manifest.args.empty() ? process_args() : manifest.args;
  json["rqat_version"] = RQAT_VERSION;
  json["git_revision"] = build_git_revision();
  json["created_utc"] = fmt::format(
      "{:%Y-%m-%dT%H:%M:%SZ}",
      fmt::gmtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())));
  json["inputs"] = manifest.inputs;
  json["config"] = manifest.config;
  json["metrics"] = manifest.metrics;
  if (!manifest.kernels.is_null()) json["kernels"] = manifest.kernels;
  std::filesystem::create_directories(dir);
  write_text_atomically(dir / kManifestFile, json.dump(2) + "\n");
}

}  // namespace rqat::io

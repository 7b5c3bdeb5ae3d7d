// manifest.json: what made an artifact directory (tool, command line, inputs, resolved
// configuration, git revision, time) and its summary metrics. Every stage writes one, and the
// runner compares a stage's manifest with its resolved configuration to skip finished work.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/json_file.h"

namespace rqat::io {

struct Manifest {
  std::string tool;               // "ptq", "eval-math", ...
  std::vector<std::string> args;  // the command line (default: the process's, see below)
  Json inputs = Json::object();   // role -> path, e.g. {"model": "runs/gptq"}
  Json config = Json::object();   // the resolved configuration of the run
  Json metrics = Json::object();  // summary metrics
  // Which path each of rqat's own kernels took and why (ops::kernel_choices_json): every stage
  // that computes sets it; null leaves it out.
  Json kernels = nullptr;
};

// The commit the tools were built from ("<sha>[-dirty]" or "unknown"); generated at build time.
const char* build_git_revision();

// The process's command line, recorded by apps at startup so library code can write manifests.
void set_process_args(int argc, const char* const* argv);
const std::vector<std::string>& process_args();

// Writes dir/manifest.json atomically, adding "git_revision", "created_utc" and "rqat_version";
// `args` empty means process_args().
void write_manifest(const std::filesystem::path& dir, const Manifest& manifest);

// dir/manifest.json as JSON; rqat::Error naming the file when missing or malformed. Defined in
// artifact.cpp, the one reader of an artifact's files (io::Artifact::manifest holds it too).
Json read_manifest(const std::filesystem::path& dir);
// The same, or null when it is absent, unreadable or not whole JSON (a stage still writing it).
Json read_manifest_or_null(const std::filesystem::path& dir);

}  // namespace rqat::io

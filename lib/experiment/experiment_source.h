// An experiment file as YAML, with --set overrides applied, and the means to name where any of its
// values came from: every error about the file points at FILE:LINE:COLUMN (or at the --set flag).
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

class ExperimentSource {
 public:
  // Parses the file (YAML syntax errors name their line) and applies "KEY=VALUE" overrides: a KEY
  // without a dot is a variable (vars.KEY); a dotted KEY is a path into the document. VALUE is read
  // as YAML, so `--set sweep.grid.bits=[2,3]` sets a list.
  ExperimentSource(const std::filesystem::path& file, const std::vector<std::string>& overrides);

  const YAML::Node& root() const { return root_; }
  const std::filesystem::path& file() const { return file_; }

  // Where the value at `path` ("stages.qat.args.lr") came from: the --set that wrote it (or one of
  // its parents), else the node's position in the file.
  SourceLocation where(const std::string& path, const YAML::Node& node) const;
  [[noreturn]] void fail_at(const std::string& path, const YAML::Node& node,
                            const std::string& message) const;

 private:
  std::filesystem::path file_;
  YAML::Node root_;
  std::map<std::string, std::string> overridden_;  // document path -> "--set KEY"
};

// Small typed readers for validation; each fails at the node with the path and what was expected.
std::string scalar_text(const ExperimentSource& source, const std::string& path,
                        const YAML::Node& node);
int non_negative_int(const ExperimentSource& source, const std::string& path,
                     const YAML::Node& node);
void require_map(const ExperimentSource& source, const std::string& path, const YAML::Node& node);
// Every key of the map must be one of `allowed`.
void check_keys(const ExperimentSource& source, const std::string& path, const YAML::Node& map,
                const std::vector<std::string>& allowed);
// A plain (unquoted) `true` or `false`.
bool is_plain_bool(const YAML::Node& node, bool value);

}  // namespace rqat::experiment

// An experiment file as YAML, with --set overrides applied, and the means to name where any of its
// values came from: every error about the file points at FILE:LINE:COLUMN (or at the --set flag).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"
#include "io/options.h"

namespace rqat::experiment {

// How much an experiment file may ask for before anything expands it (docs/reliability.md);
// `rqat run` and `rqat sbatch` take them as --max-yaml-nodes and --max-sweep-points.
struct ExperimentLimits {
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.max_yaml_nodes, "max-yaml-nodes",
            "Refuse an experiment file whose YAML has more nodes, its aliases expanded",
            io::Role::kRunControl);
    v.value(self.max_sweep_points, "max-sweep-points",
            "Refuse an experiment whose sweep has more points (grid product x zip length)",
            io::Role::kRunControl);
  }

  // Nodes of the YAML document with its aliases expanded. Real files have a few hundred; a
  // million is walked in well under a second, while ten levels of ten-fold aliases (10^10 nodes,
  // from a file of a few hundred bytes) would take hours.
  uint64_t max_yaml_nodes = 1'000'000;
  // Points of the run matrix (grid product x zip length). Each point instantiates every stage;
  // real sweeps have tens of points, and 10,000 is already ten times SLURM's default
  // MaxArraySize. 30 axes of 10 values (10^30 points) would otherwise exhaust memory.
  uint64_t max_sweep_points = 10'000;
};

class ExperimentSource {
 public:
  // Parses `text` (YAML syntax errors name their line in `file`, which names the text in every
  // message and is not read) and applies "KEY=VALUE" overrides: a KEY without a dot is a variable
  // (vars.KEY), except `seeds` (the top-level key of the training seeds); a dotted KEY is a path
  // into the document. VALUE is read as YAML, so `--set sweep.grid.bits=[2,3]` sets a list. The
  // text's nesting and alias expansion are bounded (yaml_bounds.h) before yaml-cpp builds the tree.
  ExperimentSource(const std::filesystem::path& file, const std::string& text,
                   const std::vector<std::string>& overrides, const ExperimentLimits& limits = {});

  const YAML::Node& root() const { return root_; }
  const std::filesystem::path& file() const { return file_; }
  const ExperimentLimits& limits() const { return limits_; }

  // Where the value at `path` ("stages.qat.args.lr") came from: the --set that wrote it (or one of
  // its parents), else the node's position in the file.
  SourceLocation where(const std::string& path, const YAML::Node& node) const;
  [[noreturn]] void fail_at(const std::string& path, const YAML::Node& node,
                            const std::string& message) const;

 private:
  void apply_override(const std::string& item);

  std::filesystem::path file_;
  ExperimentLimits limits_;
  YAML::Node root_;
  std::map<std::string, std::string> overridden_;  // document path -> "--set KEY"
};

// The text of an experiment file; fails "FILE: no such experiment file" when it cannot be read.
std::string read_experiment_text(const std::filesystem::path& file);

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

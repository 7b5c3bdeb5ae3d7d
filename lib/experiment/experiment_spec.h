// The validated structure of an experiment file, still unresolved: keys and types checked, stage
// references and dependency cycles found, stages in dependency order. Values keep their YAML node
// so later errors (unknown variables, bad tools) can still name their line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiment/experiment_plan.h"
#include "experiment/experiment_source.h"
#include "experiment/sweep.h"

namespace rqat::experiment {

// A value of the file and its document path ("stages.qat.args.lr").
struct LocatedValue {
  std::string path;
  YAML::Node node;

  LocatedValue() = default;
  LocatedValue(std::string path_, const YAML::Node& node_) : path(std::move(path_)), node(node_) {}
  LocatedValue(const LocatedValue&) = default;
  // YAML::Node's assignment writes through to the node it refers to (a default's value would be
  // overwritten by a stage's); a value type must rebind the handle instead.
  LocatedValue& operator=(const LocatedValue& other) {
    path = other.path;
    node.reset(other.node);
    return *this;
  }
};

using NamedValues = std::vector<std::pair<std::string, LocatedValue>>;  // in file order

struct StageSpec {
  std::string name;
  LocatedValue key;  // the stage's name in `stages`, for "the stage starts here" locations
  LocatedValue tool;
  NamedValues args;    // flag -> scalar, list of scalars, or null/false (omitted)
  NamedValues inputs;  // flag -> stage name
  std::vector<LocatedValue> positional;
  std::optional<LocatedValue> label;
  std::vector<std::pair<std::string, std::vector<LocatedValue>>>
      only;  // variable -> allowed values
  NamedValues resources;
  std::vector<std::string> depends_on;  // stages named by inputs or ${stage:NAME}
};

// A `findings:` entry with where it stands in the file (the loader checks its arms against the
// expanded stages and names this place when one matches nothing).
struct FindingSpec {
  Finding finding;
  LocatedValue key;
  LocatedValue higher, lower;  // the arms' nodes
};

// The sweep variable that `seeds:` declares (docs/experiments.md, "Training seeds").
inline constexpr const char* kSeedVariable = "seed";

struct ExperimentSpec {
  std::string name;
  std::string description;
  std::optional<LocatedValue> out;
  std::map<std::string, LocatedValue> vars;
  Sweep sweep;               // the seed axis its last grid axis when `seeds:` is declared
  std::string seed_variable;  // kSeedVariable when `seeds:` is declared, else ""
  std::map<std::string, NamedValues> defaults;  // tool -> args every stage of it gets
  NamedValues slurm_default;                    // slurm.partition/account, then slurm.default
  std::map<std::string, NamedValues> slurm_tools;
  std::vector<std::string> slurm_setup;
  std::vector<StageSpec> stages;  // dependency order; file order where free
  std::vector<FindingSpec> findings;
};

// The resource keys of `resources`, slurm.default and slurm.tools.<tool>.
const std::vector<std::string>& resource_keys();

ExperimentSpec read_experiment_spec(const ExperimentSource& source);

}  // namespace rqat::experiment

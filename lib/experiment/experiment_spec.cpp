#include "experiment/experiment_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <limits>
#include <queue>
#include <set>

#include "experiment/experiment_plan.h"
#include "experiment/interpolation.h"
#include "io/error.h"

namespace rqat::experiment {

namespace {

const std::vector<std::string> kTopKeys = {"name",     "description", "out",    "vars",
                                           "sweep",    "seeds",       "defaults", "slurm",
                                           "stages",   "findings"};
const std::vector<std::string> kStageKeys = {"tool",  "args", "inputs",    "positional",
                                             "label", "only", "resources", "description"};

bool valid_name(const std::string& name, bool allow_dots) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
           (allow_dots && c == '.');
  });
}

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// A scalar, a list of scalars, or null: what an argument or a variable may hold.
void check_value(const ExperimentSource& source, const std::string& path, const YAML::Node& node) {
  if (node.IsScalar() || node.IsNull()) return;
  if (!node.IsSequence())
    source.fail_at(path, node, "expected a value or a list of values, not a mapping");
  for (size_t i = 0; i < node.size(); ++i)
    if (!node[i].IsScalar())
      source.fail_at(fmt::format("{}[{}]", path, i), node[i], "list items must be single values");
}

NamedValues named_values(const ExperimentSource& source, const std::string& path,
                         const YAML::Node& map) {
  require_map(source, path, map);
  NamedValues values;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string child = join_path(path, key);
    if (!valid_name(key, false))
      source.fail_at(child, it->first, "a key is letters, digits, '-' and '_'");
    check_value(source, child, it->second);
    values.emplace_back(key, LocatedValue{child, it->second});
  }
  return values;
}

NamedValues resources(const ExperimentSource& source, const std::string& path,
                      const YAML::Node& map) {
  check_keys(source, path, map, resource_keys());
  auto values = named_values(source, path, map);
  for (const auto& [key, value] : values) {
    if (!value.node.IsScalar()) source.fail_at(value.path, value.node, "expected a single value");
    if ((key == "nodes" || key == "gpus" || key == "cpus" || key == "gpu_memory_gb") &&
        references_in(value.node.Scalar()).empty())
      non_negative_int(source, value.path, value.node);
  }
  return values;
}

std::vector<std::string> scalar_list(const ExperimentSource& source, const std::string& path,
                                     const YAML::Node& node) {
  if (!node.IsSequence() || node.size() == 0)
    source.fail_at(path, node, "expected a non-empty list, e.g. [2, 3]");
  std::vector<std::string> items;
  for (size_t i = 0; i < node.size(); ++i)
    items.push_back(scalar_text(source, fmt::format("{}[{}]", path, i), node[i]));
  return items;
}

// Each point instantiates every stage, so the points are counted before any is made.
void check_sweep_size(const ExperimentSource& source, const YAML::Node& node, const Sweep& sweep) {
  const uint64_t limit = source.limits().max_sweep_points;
  const uint64_t points = sweep_size(sweep);
  if (points <= limit) return;
  std::vector<size_t> factors;
  for (const auto& axis : sweep.grid) factors.push_back(axis.values.size());
  if (!sweep.zip.empty()) factors.push_back(sweep.zip.front().values.size());
  const std::string count = points == std::numeric_limits<uint64_t>::max()
                                ? "more than 10^19"
                                : fmt::format("{}", points);
  source.fail_at("sweep", node,
                 fmt::format("the sweep has {} points ({}), more than the limit of {}; raise "
                             "--max-sweep-points to expand it",
                             count, fmt::join(factors, " x "), limit));
}

// A swept variable may also have a default in vars; the sweep wins (Resolver looks there first).
Sweep read_sweep(const ExperimentSource& source, const YAML::Node& node) {
  Sweep sweep;
  check_keys(source, "sweep", node, {"grid", "zip"});
  std::set<std::string> seen;
  for (const char* kind : {"grid", "zip"}) {
    const YAML::Node axes = node[kind];
    if (!axes) continue;
    const std::string path = std::string("sweep.") + kind;
    require_map(source, path, axes);
    std::optional<size_t> zip_length;
    for (auto it = axes.begin(); it != axes.end(); ++it) {
      const std::string name = it->first.Scalar();
      const std::string child = path + "." + name;
      if (!valid_name(name, false))
        source.fail_at(child, it->first, "a variable name is letters, digits, '-' and '_'");
      if (!seen.insert(name).second)
        source.fail_at(child, it->first, "swept twice (grid and zip name the same variable)");
      SweepAxis axis{name, scalar_list(source, child, it->second)};
      if (std::string(kind) == "zip") {
        if (zip_length && *zip_length != axis.values.size())
          source.fail_at(
              child, it->second,
              fmt::format("zip lists must have one length: this one has {}, the first {}",
                          axis.values.size(), *zip_length));
        zip_length = axis.values.size();
        sweep.zip.push_back(std::move(axis));
      } else {
        sweep.grid.push_back(std::move(axis));
      }
    }
  }
  check_sweep_size(source, node, sweep);
  return sweep;
}

// `seeds: N` (seeds 0 .. N-1) or `seeds: [0, 7, 11]`: one more grid axis, the last, named
// kSeedVariable. Only the stages that use ${seed} (directly or through an input) repeat per seed. A
// `seed` in vars is the value without `seeds:` (one run per arm); the sweep wins, as for any axis.
void add_seed_axis(const ExperimentSource& source, const YAML::Node& node, ExperimentSpec& spec) {
  SweepAxis axis{kSeedVariable, {}};
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      axis.values.push_back(
          std::to_string(non_negative_int(source, fmt::format("seeds[{}]", i), node[i])));
    if (axis.values.empty()) source.fail_at("seeds", node, "expected at least one seed");
    if (std::set<std::string>(axis.values.begin(), axis.values.end()).size() != axis.values.size())
      source.fail_at("seeds", node, "a seed is listed twice");
  } else {
    const int count = non_negative_int(source, "seeds", node);
    if (count < 1) source.fail_at("seeds", node, "expected at least 1 seed");
    for (int i = 0; i < count; ++i) axis.values.push_back(std::to_string(i));
  }
  const auto names = spec.sweep.names();
  if (std::find(names.begin(), names.end(), kSeedVariable) != names.end())
    source.fail_at("seeds", node,
                   fmt::format("the sweep already has a '{}' axis: declare the seeds in one place",
                               kSeedVariable));
  spec.sweep.grid.push_back(std::move(axis));
  spec.seed_variable = kSeedVariable;
  check_sweep_size(source, node, spec.sweep);
}

// The stages a value names with ${stage:NAME}, directly or through the variables it uses. Each
// variable is followed once per value (`seen_vars` is shared by the whole walk), so variables that
// use each other several times (a diamond, or a: "${b}${b}") cost one visit each, not one per path.
void collect_stage_references(const ExperimentSource& source, const LocatedValue& value,
                              const std::map<std::string, LocatedValue>& vars,
                              std::vector<std::string>& out, std::set<std::string>& seen_vars,
                              int depth) {
  auto scan = [&](const std::string& path, const YAML::Node& node) {
    if (!node.IsScalar()) return;
    std::vector<std::string> references;
    try {
      references = references_in(node.Scalar());
    } catch (const InterpolationError& e) {
      source.fail_at(path, node, e.what());
    }
    for (const auto& inner : references) {
      if (inner.rfind("stage:", 0) == 0) {
        out.push_back(inner.substr(6));
      } else if (auto var = vars.find(inner); var != vars.end() && seen_vars.insert(inner).second) {
        // The recursion is as deep as the chain of variables: bounded, as the resolver bounds it.
        if (depth >= kMaxVariableDepth)
          source.fail_at(
              var->second.path, var->second.node,
              fmt::format("variables use variables more than {} levels deep", kMaxVariableDepth));
        collect_stage_references(source, var->second, vars, out, seen_vars, depth + 1);
      }
    }
  };
  if (value.node.IsSequence()) {
    for (size_t i = 0; i < value.node.size(); ++i)
      scan(fmt::format("{}[{}]", value.path, i), value.node[i]);
  } else {
    scan(value.path, value.node);
  }
}

void collect_stage_references(const ExperimentSource& source, const LocatedValue& value,
                              const std::map<std::string, LocatedValue>& vars,
                              std::vector<std::string>& out) {
  std::set<std::string> seen_vars;
  collect_stage_references(source, value, vars, out, seen_vars, 0);
}

StageSpec read_stage(const ExperimentSource& source,
                     const std::map<std::string, LocatedValue>& vars, const std::string& name,
                     const YAML::Node& key, const YAML::Node& node) {
  const std::string path = "stages." + name;
  StageSpec stage;
  stage.name = name;
  stage.key = {path, key};
  check_keys(source, path, node, kStageKeys);
  if (!node["tool"]) source.fail_at(path, key, "missing 'tool' (ptq, qat-kd, eval-math, ...)");
  stage.tool = {path + ".tool", node["tool"]};
  scalar_text(source, stage.tool.path, stage.tool.node);
  if (node["args"] && !node["args"].IsNull())
    stage.args = named_values(source, path + ".args", node["args"]);
  if (node["inputs"] && !node["inputs"].IsNull()) {
    stage.inputs = named_values(source, path + ".inputs", node["inputs"]);
    for (const auto& [flag, value] : stage.inputs)
      stage.depends_on.push_back(scalar_text(source, value.path, value.node));
  }
  if (const YAML::Node positional = node["positional"]) {
    if (!positional.IsSequence())
      source.fail_at(path + ".positional", positional, "expected a list of values");
    for (size_t i = 0; i < positional.size(); ++i) {
      const std::string item_path = fmt::format("{}.positional[{}]", path, i);
      scalar_text(source, item_path, positional[i]);
      stage.positional.push_back({item_path, positional[i]});
    }
  }
  if (const YAML::Node label = node["label"]) {
    scalar_text(source, path + ".label", label);
    stage.label = LocatedValue{path + ".label", label};
  }
  if (const YAML::Node description = node["description"])
    scalar_text(source, path + ".description", description);
  if (const YAML::Node only = node["only"]) {
    for (const auto& [variable, value] : named_values(source, path + ".only", only)) {
      std::vector<LocatedValue> allowed;
      if (value.node.IsSequence()) {
        for (size_t i = 0; i < value.node.size(); ++i)
          allowed.push_back({fmt::format("{}[{}]", value.path, i), value.node[i]});
      } else {
        scalar_text(source, value.path, value.node);
        allowed.push_back(value);
      }
      stage.only.emplace_back(variable, std::move(allowed));
    }
  }
  if (const YAML::Node r = node["resources"])
    stage.resources = resources(source, path + ".resources", r);

  collect_stage_references(source, stage.tool, vars, stage.depends_on);
  for (const auto& [flag, value] : stage.args)
    collect_stage_references(source, value, vars, stage.depends_on);
  for (const auto& value : stage.positional)
    collect_stage_references(source, value, vars, stage.depends_on);
  if (stage.label) collect_stage_references(source, *stage.label, vars, stage.depends_on);
  return stage;
}

// Depth-first search for a cycle, so the message can show it. The search keeps its own stack: a
// chain of many stages (each the input of the next) must not recurse once per stage.
void check_no_dependency_cycle(const ExperimentSource& source, const std::vector<StageSpec>& stages,
                               const std::map<std::string, size_t>& index) {
  std::vector<int> state(stages.size(), 0);  // 0 new, 1 on the path, 2 done
  struct Frame {
    size_t stage;
    size_t next_dep = 0;
  };
  std::vector<Frame> path;
  for (size_t root = 0; root < stages.size(); ++root) {
    if (state[root] != 0) continue;
    state[root] = 1;
    path.push_back({root});
    while (!path.empty()) {
      Frame& frame = path.back();
      const auto& deps = stages[frame.stage].depends_on;
      if (frame.next_dep == deps.size()) {
        state[frame.stage] = 2;
        path.pop_back();
        continue;
      }
      const size_t j = index.at(deps[frame.next_dep++]);
      if (state[j] == 1) {
        std::vector<std::string> cycle;
        auto from =
            std::find_if(path.begin(), path.end(), [&](const Frame& f) { return f.stage == j; });
        for (auto it = from; it != path.end(); ++it) cycle.push_back(stages[it->stage].name);
        cycle.push_back(stages[j].name);
        source.fail_at(stages[j].key.path, stages[j].key.node,
                       fmt::format("dependency cycle: {}", fmt::join(cycle, " -> ")));
      }
      if (state[j] == 0) {
        state[j] = 1;
        path.push_back({j});  // `frame` is not used after this: the push may move it
      }
    }
  }
}

// Kahn's algorithm, taking the earliest stage of the file among the ready ones (a min-heap of
// indices, so many stages cost n log n, not a rescan of the file per stage placed).
std::vector<StageSpec> dependency_order(std::vector<StageSpec> stages,
                                        const std::map<std::string, size_t>& index) {
  std::vector<size_t> waiting_for(stages.size());
  std::vector<std::vector<size_t>> dependants(stages.size());
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < stages.size(); ++i) {
    waiting_for[i] = stages[i].depends_on.size();  // with repeats, released as often
    for (const auto& dep : stages[i].depends_on) dependants[index.at(dep)].push_back(i);
    if (waiting_for[i] == 0) ready.push(i);
  }
  std::vector<StageSpec> ordered;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    for (size_t d : dependants[i])
      if (--waiting_for[d] == 0) ready.push(d);
    ordered.push_back(std::move(stages[i]));
  }
  return ordered;
}

// Dependency order; a cycle is reported with its path.
std::vector<StageSpec> order_stages(const ExperimentSource& source, std::vector<StageSpec> stages) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < stages.size(); ++i) index[stages[i].name] = i;
  for (const auto& stage : stages) {
    for (const auto& dep : stage.depends_on) {
      if (!index.count(dep)) {
        std::vector<std::string> names;
        for (const auto& s : stages) names.push_back(s.name);
        source.fail_at(stage.key.path, stage.key.node,
                       fmt::format("needs stage '{}', which does not exist (stages: {})", dep,
                                   fmt::join(names, ", ")));
      }
      if (dep == stage.name) source.fail_at(stage.key.path, stage.key.node, "depends on itself");
    }
  }
  check_no_dependency_cycle(source, stages, index);
  return dependency_order(std::move(stages), index);
}

}  // namespace

const std::vector<std::string>& resource_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> names;
    for (const auto& field : slurm_resource_fields()) names.emplace_back(field.name);
    return names;
  }();
  return keys;
}

namespace {

FindingArm read_arm(const ExperimentSource& source, const std::string& path, const YAML::Node& node,
                    const std::vector<StageSpec>& stages) {
  check_keys(source, path, node, {"stage", "where"});
  if (!node["stage"]) source.fail_at(path, node, "missing 'stage' (an eval-math stage)");
  FindingArm arm;
  arm.stage = scalar_text(source, path + ".stage", node["stage"]);
  if (std::none_of(stages.begin(), stages.end(),
                   [&](const StageSpec& s) { return s.name == arm.stage; }))
    source.fail_at(path + ".stage", node["stage"],
                   fmt::format("no stage '{}' in this experiment", arm.stage));
  if (const YAML::Node where = node["where"]; where && !where.IsNull())
    for (const auto& [variable, value] : named_values(source, path + ".where", where))
      arm.where.emplace_back(variable, scalar_text(source, value.path, value.node));
  return arm;
}

// findings: {NAME: {claim, metric, higher: {stage, where}, lower: {stage, where}}}
std::vector<FindingSpec> read_findings(const ExperimentSource& source, const YAML::Node& node,
                                       const std::vector<StageSpec>& stages) {
  require_map(source, "findings", node);
  std::vector<FindingSpec> findings;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string path = "findings." + name;
    if (!valid_name(name, false))
      source.fail_at(path, it->first, "a finding's name is letters, digits, '-' and '_'");
    const YAML::Node f = it->second;  // a copy: it->second is a member of a temporary proxy
    require_map(source, path, f);
    check_keys(source, path, f, {"claim", "metric", "higher", "lower"});
    FindingSpec spec;
    spec.key = {path, it->first};
    spec.finding.name = name;
    if (f["claim"]) spec.finding.claim = scalar_text(source, path + ".claim", f["claim"]);
    if (f["metric"]) {
      spec.finding.metric = scalar_text(source, path + ".metric", f["metric"]);
      if (spec.finding.metric != "accuracy" && spec.finding.metric != "reward")
        source.fail_at(path + ".metric", f["metric"],
                       fmt::format("unknown metric '{}' (expected accuracy or reward)",
                                   spec.finding.metric));
    }
    for (const char* arm : {"higher", "lower"}) {
      if (!f[arm])
        source.fail_at(path, it->first,
                       fmt::format("missing '{}' (the arm the paper says scores {})", arm, arm));
      require_map(source, path + "." + arm, f[arm]);
    }
    spec.finding.higher = read_arm(source, path + ".higher", f["higher"], stages);
    spec.finding.lower = read_arm(source, path + ".lower", f["lower"], stages);
    spec.higher = {path + ".higher", f["higher"]};
    spec.lower = {path + ".lower", f["lower"]};
    findings.push_back(std::move(spec));
  }
  return findings;
}

}  // namespace

ExperimentSpec read_experiment_spec(const ExperimentSource& source) {
  const YAML::Node& root = source.root();
  check_keys(source, "", root, kTopKeys);
  ExperimentSpec spec;
  if (!root["name"])
    fail("{}: missing 'name' (it names the run directory)", source.file().string());
  spec.name = scalar_text(source, "name", root["name"]);
  if (!valid_name(spec.name, true))
    source.fail_at("name", root["name"], "a name is letters, digits, '.', '-' and '_'");
  if (root["description"])
    spec.description = scalar_text(source, "description", root["description"]);
  if (root["out"]) {
    scalar_text(source, "out", root["out"]);
    spec.out = LocatedValue{"out", root["out"]};
  }
  if (root["vars"] && !root["vars"].IsNull())
    for (auto& [name, value] : named_values(source, "vars", root["vars"])) spec.vars[name] = value;
  if (root["sweep"] && !root["sweep"].IsNull()) spec.sweep = read_sweep(source, root["sweep"]);
  if (root["seeds"] && !root["seeds"].IsNull()) add_seed_axis(source, root["seeds"], spec);

  if (const YAML::Node defaults = root["defaults"]; defaults && !defaults.IsNull()) {
    require_map(source, "defaults", defaults);
    for (auto it = defaults.begin(); it != defaults.end(); ++it) {
      const std::string tool = it->first.Scalar();
      spec.defaults[tool] = named_values(source, "defaults." + tool, it->second);
    }
  }
  if (const YAML::Node slurm = root["slurm"]; slurm && !slurm.IsNull()) {
    check_keys(source, "slurm", slurm, {"partition", "account", "setup", "default", "tools"});
    for (const char* key : {"partition", "account"}) {
      if (!slurm[key]) continue;
      const std::string path = std::string("slurm.") + key;
      scalar_text(source, path, slurm[key]);
      spec.slurm_default.emplace_back(key, LocatedValue{path, slurm[key]});
    }
    if (slurm["setup"]) spec.slurm_setup = scalar_list(source, "slurm.setup", slurm["setup"]);
    if (slurm["default"]) {
      auto values = resources(source, "slurm.default", slurm["default"]);
      spec.slurm_default.insert(spec.slurm_default.end(), values.begin(), values.end());
    }
    if (const YAML::Node tools = slurm["tools"]) {
      require_map(source, "slurm.tools", tools);
      for (auto it = tools.begin(); it != tools.end(); ++it) {
        const std::string tool = it->first.Scalar();
        spec.slurm_tools[tool] = resources(source, "slurm.tools." + tool, it->second);
      }
    }
  }

  const YAML::Node stages = root["stages"];
  if (!stages || stages.IsNull() || (stages.IsMap() && stages.size() == 0))
    fail("{}: no 'stages': an experiment needs at least one stage", source.file().string());
  require_map(source, "stages", stages);
  std::vector<StageSpec> read;
  for (auto it = stages.begin(); it != stages.end(); ++it) {
    const std::string name = it->first.Scalar();
    if (!valid_name(name, false))
      source.fail_at("stages." + name, it->first,
                     "a stage name is letters, digits, '-' and '_' (it becomes a directory name)");
    read.push_back(read_stage(source, spec.vars, name, it->first, it->second));
    // The defaults of its tool become its arguments, and may name stages too.
    StageSpec& stage = read.back();
    if (auto d = spec.defaults.find(stage.tool.node.Scalar()); d != spec.defaults.end())
      for (const auto& [flag, value] : d->second)
        collect_stage_references(source, value, spec.vars, stage.depends_on);
  }
  spec.stages = order_stages(source, std::move(read));
  if (const YAML::Node findings = root["findings"]; findings && !findings.IsNull())
    spec.findings = read_findings(source, findings, spec.stages);
  return spec;
}

}  // namespace rqat::experiment

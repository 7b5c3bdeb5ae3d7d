#include "experiment/experiment_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "experiment/experiment_spec.h"
#include "experiment/interpolation.h"
#include "io/error.h"

namespace rqat::experiment {

namespace {

// The binaries a stage may run; `rqat` takes a subcommand ("rqat traces").
const std::vector<std::string> kPrograms = {"ptq",  "qat-sft",   "qat-kd",
                                            "grpo", "eval-math", "rqat"};

// Argument keys whose values are files or directories the stage reads: checked for existence so
// a typo in a model path stops the run before any stage starts, not hours into it.
const std::set<std::string> kInputPathKeys = {"model",         "teacher",   "data",
                                              "eval-data",     "calib",     "data-dir",
                                              "config",        "tokenizer", "eval-benchmark-data",
                                              "chat-template", "llama2c",   "tokenizer-bin"};

// A resolved value: one text, or a list (from a list in the file or a list variable).
struct Value {
  std::vector<std::string> items;
  bool is_list = false;
  std::optional<bool> boolean;  // a plain true/false: a switch, passed as a bare --flag or left out
};

// Resolves ${...} for one sweep point, recording which sweep variables a value used. Each value
// it is asked for is resolved within the bounds of interpolation.h.
class Resolver {
 public:
  Resolver(const ExperimentSource& source, const ExperimentSpec& spec, const SweepPoint& point,
           std::map<std::string, std::string> builtins)
      : source_(source), spec_(spec), point_(point), builtins_(std::move(builtins)) {}

  // Directories of the stages resolved so far at this point (for ${stage:NAME}); until a stage
  // instance is being built there are none.
  std::function<std::string(const std::string& stage)> stage_dir = [](const std::string& stage) {
    return std::string(no_stage_here(stage));
  };
  std::set<std::string>* used = nullptr;  // sweep variables used (may be null)

  std::string text(const LocatedValue& value) { return text(value.path, value.node); }

  std::string text(const std::string& path, const YAML::Node& node) {
    start_value();
    return resolve_text(path, node);
  }

  Value value(const LocatedValue& v) {
    start_value();
    return resolve_value(v);
  }

 private:
  [[noreturn]] static std::string no_stage_here(const std::string& stage) {
    throw InterpolationError(fmt::format(
        "${{stage:{}}} can only be used in a stage (its tool, args, positional or label)", stage));
  }

  // A new value gets a fresh budget; the variables it uses spend from it.
  void start_value() {
    if (resolving_.empty()) spent_ = {};
  }

  void spend_reference() {
    if (++spent_.references > kMaxReferencesPerValue)
      throw InterpolationError(fmt::format(
          "expands more than {} ${{...}} references (variables that use other variables several "
          "times multiply)",
          kMaxReferencesPerValue));
  }

  void spend_characters(size_t count) {
    spent_.characters += count;
    if (spent_.characters > kMaxExpandedCharsPerValue)
      throw InterpolationError(
          fmt::format("expands to more than {} characters", kMaxExpandedCharsPerValue));
  }

  std::string resolve_text(const std::string& path, const YAML::Node& node) {
    try {
      std::string out =
          interpolate(node.Scalar(), [&](const std::string& inner) { return scalar_of(inner); });
      spend_characters(out.size());
      return out;
    } catch (const InterpolationError& e) {
      source_.fail_at(path, node, e.what());
    }
  }

  Value resolve_value(const LocatedValue& v) {
    Value out;
    if (v.node.IsNull()) return out;
    if (v.node.IsSequence()) {
      out.is_list = true;
      for (size_t i = 0; i < v.node.size(); ++i)
        out.items.push_back(resolve_text(fmt::format("{}[{}]", v.path, i), v.node[i]));
      return out;
    }
    if (const auto name = sole_reference(v.node.Scalar()); name && name->rfind("stage:", 0) != 0) {
      try {
        spend_reference();
        return variable(*name);
      } catch (const InterpolationError& e) {
        source_.fail_at(v.path, v.node, e.what());
      }
    }
    out.items.push_back(resolve_text(v.path, v.node));
    if (is_plain_bool(v.node, true)) out.boolean = true;
    if (is_plain_bool(v.node, false)) out.boolean = false;
    return out;
  }

  std::string scalar_of(const std::string& inner) {
    spend_reference();
    if (inner.rfind("stage:", 0) == 0) return stage_dir(inner.substr(6));
    Value v = variable(inner);
    if (v.is_list)
      throw InterpolationError(
          fmt::format("variable '{}' is a list; only a value that is exactly "
                      "'${{{}}}' can hold a list",
                      inner, inner));
    return v.items.empty() ? "" : v.items.front();
  }

  Value variable(const std::string& name) {
    for (const auto& [key, value] : point_) {
      if (key != name) continue;
      if (used) used->insert(name);
      // A sweep's true/false is a switch, as a variable's is (`imatrix: [false, true]`).
      std::optional<bool> boolean;
      if (value == "true" || value == "false") boolean = value == "true";
      return Value{{value}, false, boolean};
    }
    if (auto it = builtins_.find(name); it != builtins_.end())
      return Value{{it->second}, false, std::nullopt};
    auto it = spec_.vars.find(name);
    if (it == spec_.vars.end())
      throw InterpolationError(fmt::format("unknown variable '{}'", name));
    if (std::find(resolving_.begin(), resolving_.end(), name) != resolving_.end())
      throw InterpolationError(fmt::format("variables refer to each other in a cycle: {} -> {}",
                                           fmt::join(resolving_, " -> "), name));
    // Each level is a few stack frames; the spec reader refuses deeper chains already.
    if (resolving_.size() >= static_cast<size_t>(kMaxVariableDepth))
      throw InterpolationError(
          fmt::format("variables use variables more than {} levels deep", kMaxVariableDepth));
    resolving_.push_back(name);
    Value v = resolve_value(it->second);
    resolving_.pop_back();
    return v;
  }

  struct Spent {
    size_t references = 0;
    size_t characters = 0;
  };

  const ExperimentSource& source_;
  const ExperimentSpec& spec_;
  const SweepPoint& point_;
  std::map<std::string, std::string> builtins_;
  std::vector<std::string> resolving_;
  Spent spent_;  // by the value being resolved
};

std::string id_component(const std::string& value) {
  std::string out;
  for (char c : value)
    out +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-'
            ? c
            : '_';
  return out;
}

void apply_resources(const ExperimentSource& source, Resolver& resolver, const NamedValues& values,
                     SlurmResources& r) {
  // Plain references, not structured bindings: clang 14 (the fuzz build) cannot capture those.
  for (const auto& entry : values) {
    const auto& key = entry.first;
    const auto& value = entry.second;
    const std::string text = resolver.text(value);
    auto as_int = [&] {
      if (text.empty() || !std::all_of(text.begin(), text.end(), ::isdigit) || text.size() > 6)
        source.fail_at(value.path, value.node,
                       fmt::format("expected a non-negative integer, got '{}'", text));
      return std::stoi(text);
    };
    const auto& fields = slurm_resource_fields();
    const auto field = std::find_if(fields.begin(), fields.end(),
                                    [&](const ResourceField& f) { return key == f.name; });
    if (field == fields.end()) continue;  // the spec reader rejected unknown keys already
    if (field->number)
      r.*field->number = as_int();
    else
      r.*field->text = text;
  }
}

bool inside(const std::filesystem::path& path, const std::filesystem::path& dir) {
  const auto p = path.lexically_normal().string();
  const auto d = dir.lexically_normal().string();
  return p == d || (p.size() > d.size() && p.compare(0, d.size(), d) == 0 && p[d.size()] == '/');
}

bool only_allows(Resolver& resolver, const StageSpec& stage, const SweepPoint& point,
                 const ExperimentSpec& spec, const ExperimentSource& source) {
  for (const auto& [variable, allowed] : stage.only) {
    std::string actual;
    bool known = false;
    for (const auto& [key, value] : point)
      if (key == variable) actual = value, known = true;
    if (!known && spec.vars.count(variable)) {
      actual = resolver.text(allowed.front().path, YAML::Node("${" + variable + "}"));
      known = true;
    }
    if (!known)
      source.fail_at(
          allowed.front().path, allowed.front().node,
          fmt::format("'only' names '{}', which is neither a variable nor swept", variable));
    bool match = false;
    for (const auto& value : allowed) match = match || resolver.text(value) == actual;
    if (!match) return false;
  }
  return true;
}

// The tool's defaults, then the stage's own arguments: a stage argument replaces the default of
// the same name in the default's place, so flag order stays that of the defaults.
NamedValues merged_args(const ExperimentSpec& spec, const StageSpec& stage,
                        const std::string& tool) {
  NamedValues args;
  if (auto it = spec.defaults.find(tool); it != spec.defaults.end()) args = it->second;
  for (const auto& entry : stage.args) {
    const auto& [key, value] = entry;
    auto same = std::find_if(args.begin(), args.end(),
                             [&](const auto& a) { return a.first == entry.first; });
    if (same != args.end())
      same->second = value;
    else
      args.emplace_back(key, value);
  }
  return args;
}

// Splits the resolved `tool` into program and (for rqat) subcommand, which starts argv; checked
// here so a misspelt tool stops the plan instead of failing when the stage runs.
void parse_tool(const ExperimentSource& source, const StageSpec& stage, StageInstance& instance) {
  std::istringstream words(instance.tool);
  std::string word;
  std::vector<std::string> parts;
  while (words >> word) parts.push_back(word);
  if (parts.empty() || std::find(kPrograms.begin(), kPrograms.end(), parts[0]) == kPrograms.end())
    source.fail_at(stage.tool.path, stage.tool.node,
                   fmt::format("unknown tool '{}' (expected one of: {}; rqat takes a subcommand)",
                               instance.tool, fmt::join(kPrograms, ", ")));
  if ((parts[0] == "rqat") != (parts.size() == 2) || parts.size() > 2)
    source.fail_at(stage.tool.path, stage.tool.node,
                   parts[0] == "rqat" ? "'rqat' needs one subcommand, e.g. 'rqat traces'"
                                      : "a tool is one word (only rqat takes a subcommand)");
  instance.program = parts[0];
  if (parts.size() == 2) instance.argv.push_back(parts[1]);
}

// The run directory: --out, else the file's `out` (resolved before any sweep point: every
// instance shares it), else runs/<name>.
std::filesystem::path plan_run_dir(const PlanOptions& options, const ExperimentSource& source,
                                   const ExperimentSpec& spec,
                                   const std::vector<std::string>& sweep_variables,
                                   const std::map<std::string, std::string>& builtins) {
  std::filesystem::path run_dir;
  if (options.run_dir) {
    run_dir = *options.run_dir;
  } else if (spec.out) {
    const SweepPoint none;
    Resolver resolver(source, spec, none, builtins);
    run_dir = resolver.text(*spec.out);
    for (const auto& name : sweep_variables)
      for (const auto& ref : references_in(spec.out->node.Scalar()))
        if (ref == name)
          source.fail_at("out", spec.out->node,
                         "the run directory cannot depend on a swept variable");
  } else {
    run_dir = std::filesystem::path("runs") / spec.name;
  }
  return run_dir.lexically_normal();
}

// Two instances writing one place would overwrite each other (an explicit `out` that does not
// mention the sweep variables that tell them apart).
void check_distinct_outputs(const ExperimentPlan& plan) {
  std::map<std::string, const StageInstance*> writers;
  for (const auto& s : plan.stages) {
    for (size_t i = 0; i + 1 < s.argv.size(); ++i) {
      if (s.argv[i] != "--out") continue;
      const auto [it, fresh] = writers.emplace(s.argv[i + 1], &s);
      if (!fresh)
        fail(
            "{}: stages {} and {} both write --out {}; make `out` depend on the sweep variables "
            "that separate them",
            s.location.to_string(), it->second->id, s.id, s.argv[i + 1]);
    }
  }
}

// What the expansion of every stage at every sweep point shares: the plan so far and which
// instance each stage became at each point (stages come before their dependants, so a stage's
// inputs are always known by the time it is expanded).
struct PlanState {
  const ExperimentSource& source;
  const ExperimentSpec& spec;
  ExperimentPlan& plan;
  std::map<std::string, std::string> builtins;
  bool check_input_paths;
  std::vector<SweepPoint> points;
  // instance id of each stage at each point (absent: excluded there by `only`)
  std::vector<std::map<std::string, std::string>> point_instances;
  std::map<std::string, size_t> instance_index;
  std::set<std::string> processed;  // stages already expanded (they come before their dependants)
};

// Builds the instance of one stage at one sweep point. It tracks which sweep variables and input
// stages the values used (they decide the instance id) and which value is being resolved, so an
// error from ${stage:NAME} points at that value.
class InstanceBuilder {
 public:
  InstanceBuilder(PlanState& state, const StageSpec& stage, size_t p, Resolver& resolver)
      : state_(state), stage_(stage), p_(p), resolver_(resolver) {
    resolver_.stage_dir = [this](const std::string& name) {
      return input_instance(name, *current_).out_dir.string();
    };
    resolver_.used = &used_;
  }
  InstanceBuilder(const InstanceBuilder&) = delete;  // the resolver refers back to this object
  InstanceBuilder& operator=(const InstanceBuilder&) = delete;

  StageInstance build() {
    instance_.stage = stage_.name;
    instance_.location = state_.source.where(stage_.key.path, stage_.key.node);
    current_ = &stage_.tool;
    instance_.tool = resolver_.text(stage_.tool);
    parse_tool(state_.source, stage_, instance_);

    const NamedValues args = merged_args(state_.spec, stage_, instance_.tool);
    add_input_args();
    const bool explicit_out = add_flag_args(args);
    const std::vector<std::string> positional = resolve_positional();

    set_id();
    if (!explicit_out) {
      instance_.argv.push_back("--out");
      instance_.argv.push_back(instance_.out_dir.string());
    }
    instance_.argv.insert(instance_.argv.end(), positional.begin(), positional.end());
    instance_.inputs = inputs_;

    resolver_.used = nullptr;  // labels and resources do not make instances different
    instance_.label = stage_.label ? resolver_.text(*stage_.label) : instance_.id;
    apply_all_resources();
    return std::move(instance_);
  }

 private:
  // The instance of stage `name` at this point, recorded as an input (its sweep variables become
  // this instance's too: outputs of different inputs must not share a directory).
  const StageInstance& input_instance(const std::string& name, const LocatedValue& at) {
    auto& instances = state_.point_instances[p_];
    auto it = instances.find(name);
    if (it == instances.end())
      state_.source.fail_at(
          at.path, at.node,
          state_.processed.count(name)
              ? fmt::format("needs stage '{}', which 'only' leaves out at this sweep point", name)
              : fmt::format("refers to stage '{}', which is not among the stages this one "
                            "depends on (name it in `inputs` or use ${{stage:{}}} in args)",
                            name, name));
    const StageInstance& input = state_.plan.stages[state_.instance_index.at(it->second)];
    if (std::find(inputs_.begin(), inputs_.end(), input.id) == inputs_.end())
      inputs_.push_back(input.id);
    for (const auto& [key, value] : input.point) used_.insert(key);
    return input;
  }

  // `inputs`: each flag gets the output directory of the named stage's instance at this point.
  void add_input_args() {
    for (const auto& [flag, value] : stage_.inputs) {
      current_ = &value;
      const auto& input = input_instance(value.node.Scalar(), value);
      instance_.argv.push_back("--" + flag);
      instance_.argv.push_back(input.out_dir.string());
    }
  }

  // The arguments as flags (a list repeats the flag, a true switch is a bare flag); returns
  // whether one of them is `out`, which then replaces the default output directory.
  bool add_flag_args(const NamedValues& args) {
    bool explicit_out = false;
    for (const auto& [flag, value] : args) {
      current_ = &value;
      if (flag == "out") explicit_out = true;
      const Value v = resolver_.value(value);
      if (v.boolean) {
        if (*v.boolean) instance_.argv.push_back("--" + flag);
        continue;
      }
      for (const auto& item : v.items) {
        instance_.argv.push_back("--" + flag);
        instance_.argv.push_back(item);
        if (kInputPathKeys.count(flag) && !item.empty()) note_if_missing(item, value);
      }
    }
    return explicit_out;
  }

  // Positional arguments go after --out, so they are resolved now and appended last.
  std::vector<std::string> resolve_positional() {
    std::vector<std::string> positional;
    for (const auto& value : stage_.positional) {
      current_ = &value;
      positional.push_back(resolver_.text(value));
      note_if_missing(positional.back(), value);
    }
    return positional;
  }

  // Paths under the run directory are written by earlier stages; anything else must exist now.
  void note_if_missing(const std::string& item, const LocatedValue& value) {
    if (!state_.check_input_paths) return;
    if (!inside(item, state_.plan.run_dir) && !std::filesystem::exists(item))
      instance_.missing_paths.push_back(
          fmt::format("{}: {}", state_.source.where(value.path, value.node).to_string(), item));
  }

  // The id: the stage and the sweep variables it depends on, in sweep order.
  void set_id() {
    instance_.id = stage_.name;
    for (const auto& [key, value] : state_.points[p_]) {
      if (!used_.count(key)) continue;
      instance_.point.emplace_back(key, value);
      instance_.id += "." + id_component(key) + "-" + id_component(value);
    }
    instance_.out_dir = state_.plan.run_dir / instance_.id;
  }

  // slurm defaults, then those of the tool (else of its program), then the stage's own.
  void apply_all_resources() {
    const auto& source = state_.source;
    const auto& spec = state_.spec;
    apply_resources(source, resolver_, spec.slurm_default, instance_.resources);
    if (auto it = spec.slurm_tools.find(instance_.tool); it != spec.slurm_tools.end())
      apply_resources(source, resolver_, it->second, instance_.resources);
    else if (auto it2 = spec.slurm_tools.find(instance_.program); it2 != spec.slurm_tools.end())
      apply_resources(source, resolver_, it2->second, instance_.resources);
    apply_resources(source, resolver_, stage_.resources, instance_.resources);
  }

  PlanState& state_;
  const StageSpec& stage_;
  const size_t p_;
  Resolver& resolver_;
  std::set<std::string> used_;                 // sweep variables the instance depends on
  std::vector<std::string> inputs_;            // ids of the instances it reads, in first-use order
  const LocatedValue* current_ = &stage_.key;  // the value being resolved, for error locations
  StageInstance instance_;
};

// Adds the instance unless an identical one exists: sweep points that differ only in variables
// the stage does not use share one instance (and one run).
void add_instance(PlanState& state, const StageSpec& stage, size_t p, StageInstance instance) {
  auto& plan = state.plan;
  if (auto it = state.instance_index.find(instance.id); it != state.instance_index.end()) {
    const StageInstance& existing = plan.stages[it->second];
    if (existing.argv != instance.argv || existing.program != instance.program)
      state.source.fail_at(
          stage.key.path, stage.key.node,
          fmt::format("two sweep points give stage instance '{}' different commands; "
                      "sweep values that differ only in characters other than letters, "
                      "digits, '.', '-', '_' and '+' collide in directory names",
                      instance.id));
    state.point_instances[p][stage.name] = instance.id;
    return;
  }
  state.instance_index[instance.id] = plan.stages.size();
  state.point_instances[p][stage.name] = instance.id;
  plan.stages.push_back(std::move(instance));
}

// One instance of the stage per sweep point, except where `only` (its own or an input's) leaves
// it out.
void expand_stage(PlanState& state, const StageSpec& stage) {
  for (size_t p = 0; p < state.points.size(); ++p) {
    const SweepPoint& point = state.points[p];
    Resolver resolver(state.source, state.spec, point, state.builtins);
    if (!only_allows(resolver, stage, point, state.spec, state.source)) continue;
    // A stage whose input `only` left out at this point is left out with it (eval of grpo).
    if (std::any_of(stage.depends_on.begin(), stage.depends_on.end(),
                    [&](const auto& dep) { return !state.point_instances[p].count(dep); }))
      continue;
    InstanceBuilder builder(state, stage, p, resolver);
    add_instance(state, stage, p, builder.build());
  }
  state.processed.insert(stage.name);
}

}  // namespace

ExperimentPlan load_experiment_plan(const PlanOptions& options) {
  return load_experiment_plan_from_text(read_experiment_text(options.experiment_file), options);
}

namespace {

// A finding's arm names sweep variables and an eval-math stage. An arm that matches no instance is
// not an error: a sweep narrowed with --set leaves some out, and the report says "not run".
void check_finding_arm(const ExperimentSource& source, const ExperimentPlan& plan,
                       const FindingArm& arm, const LocatedValue& at) {
  for (const auto& [variable, value] : arm.where)
    if (std::find(plan.sweep_variables.begin(), plan.sweep_variables.end(), variable) ==
        plan.sweep_variables.end())
      source.fail_at(at.path + ".where." + variable, at.node["where"][variable],
                     fmt::format("'{}' is not a sweep variable (sweep: {})", variable,
                                 fmt::join(plan.sweep_variables, ", ")));
  for (const auto& s : plan.stages)
    if (s.stage == arm.stage && s.tool != "eval-math")
      source.fail_at(at.path + ".stage", at.node["stage"],
                     fmt::format("stage '{}' runs {}, not eval-math", arm.stage, s.tool));
}

// `seeds:` that no stage uses would run every arm once while the report counts seeds: a mistake.
void check_seeds_used(const ExperimentSource& source, const ExperimentPlan& plan) {
  if (plan.seed_variable.empty()) return;
  for (const auto& s : plan.stages)
    if (!point_value(s, plan.seed_variable).empty()) return;
  source.fail_at("seeds", source.root()["seeds"],
                 fmt::format("no stage uses ${{{}}}: give the training stages `seed: ${{{}}}` "
                             "(e.g. in defaults) or drop `seeds`",
                             plan.seed_variable, plan.seed_variable));
}

}  // namespace

ExperimentPlan load_experiment_plan_from_text(const std::string& yaml_text,
                                              const PlanOptions& options) {
  const ExperimentSource source(options.experiment_file, yaml_text, options.overrides,
                                options.limits);
  const ExperimentSpec spec = read_experiment_spec(source);

  ExperimentPlan plan;
  plan.name = spec.name;
  plan.description = spec.description;
  plan.experiment_file = options.experiment_file;
  plan.sweep_variables = spec.sweep.names();
  plan.seed_variable = spec.seed_variable;
  plan.slurm_setup = spec.slurm_setup;

  std::map<std::string, std::string> builtins = {
      {"experiment", spec.name},
      {"experiment_dir", options.experiment_file.parent_path().lexically_normal().string()}};
  if (builtins["experiment_dir"].empty()) builtins["experiment_dir"] = ".";
  plan.run_dir = plan_run_dir(options, source, spec, plan.sweep_variables, builtins);
  builtins["run_dir"] = plan.run_dir.string();

  PlanState state{
      source, spec, plan, std::move(builtins), options.check_input_paths, expand_sweep(spec.sweep),
      {},     {},   {}};
  state.point_instances.resize(state.points.size());
  for (const auto& stage : spec.stages) expand_stage(state, stage);
  check_distinct_outputs(plan);
  check_seeds_used(source, plan);
  for (const auto& finding : spec.findings) {
    check_finding_arm(source, plan, finding.finding.higher, finding.higher);
    check_finding_arm(source, plan, finding.finding.lower, finding.lower);
    plan.findings.push_back(finding.finding);
  }
  return plan;
}

}  // namespace rqat::experiment

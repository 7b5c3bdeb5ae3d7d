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

// Resolves ${...} for one sweep point, recording which sweep variables a value used.
class Resolver {
 public:
  Resolver(const ExperimentSource& source, const ExperimentSpec& spec, const SweepPoint& point,
           std::map<std::string, std::string> builtins)
      : source_(source), spec_(spec), point_(point), builtins_(std::move(builtins)) {}

  // Directories of the stages resolved so far at this point (for ${stage:NAME}).
  std::function<std::string(const std::string& stage)> stage_dir;
  std::set<std::string>* used = nullptr;  // sweep variables used (may be null)

  std::string text(const LocatedValue& value) { return text(value.path, value.node); }

  std::string text(const std::string& path, const YAML::Node& node) {
    try {
      return interpolate(node.Scalar(), [&](const std::string& inner) { return scalar_of(inner); });
    } catch (const InterpolationError& e) {
      source_.fail_at(path, node, e.what());
    }
  }

  Value value(const LocatedValue& v) {
    Value out;
    if (v.node.IsNull()) return out;
    if (v.node.IsSequence()) {
      out.is_list = true;
      for (size_t i = 0; i < v.node.size(); ++i)
        out.items.push_back(text(fmt::format("{}[{}]", v.path, i), v.node[i]));
      return out;
    }
    if (const auto name = sole_reference(v.node.Scalar()); name && name->rfind("stage:", 0) != 0) {
      try {
        return variable(*name);
      } catch (const InterpolationError& e) {
        source_.fail_at(v.path, v.node, e.what());
      }
    }
    out.items.push_back(text(v));
    if (is_plain_bool(v.node, true)) out.boolean = true;
    if (is_plain_bool(v.node, false)) out.boolean = false;
    return out;
  }

 private:
  std::string scalar_of(const std::string& inner) {
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
      return Value{{value}, false, std::nullopt};
    }
    if (auto it = builtins_.find(name); it != builtins_.end())
      return Value{{it->second}, false, std::nullopt};
    auto it = spec_.vars.find(name);
    if (it == spec_.vars.end())
      throw InterpolationError(fmt::format("unknown variable '{}'", name));
    if (std::find(resolving_.begin(), resolving_.end(), name) != resolving_.end())
      throw InterpolationError(fmt::format("variables refer to each other in a cycle: {} -> {}",
                                           fmt::join(resolving_, " -> "), name));
    resolving_.push_back(name);
    Value v = value(it->second);
    resolving_.pop_back();
    return v;
  }

  const ExperimentSource& source_;
  const ExperimentSpec& spec_;
  const SweepPoint& point_;
  std::map<std::string, std::string> builtins_;
  std::vector<std::string> resolving_;
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
  for (const auto& [key, value] : values) {
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

}  // namespace

ExperimentPlan load_experiment_plan(const PlanOptions& options) {
  const ExperimentSource source(options.experiment_file, options.overrides);
  const ExperimentSpec spec = read_experiment_spec(source);

  ExperimentPlan plan;
  plan.name = spec.name;
  plan.description = spec.description;
  plan.experiment_file = options.experiment_file;
  plan.sweep_variables = spec.sweep.names();
  plan.slurm_setup = spec.slurm_setup;

  std::map<std::string, std::string> builtins = {
      {"experiment", spec.name},
      {"experiment_dir", options.experiment_file.parent_path().lexically_normal().string()}};
  if (builtins["experiment_dir"].empty()) builtins["experiment_dir"] = ".";
  if (options.run_dir) {
    plan.run_dir = *options.run_dir;
  } else if (spec.out) {
    const SweepPoint none;
    Resolver resolver(source, spec, none, builtins);
    plan.run_dir = resolver.text(*spec.out);
    for (const auto& name : plan.sweep_variables)
      for (const auto& ref : references_in(spec.out->node.Scalar()))
        if (ref == name)
          source.fail_at("out", spec.out->node,
                         "the run directory cannot depend on a swept variable");
  } else {
    plan.run_dir = std::filesystem::path("runs") / spec.name;
  }
  plan.run_dir = plan.run_dir.lexically_normal();
  builtins["run_dir"] = plan.run_dir.string();

  const auto points = expand_sweep(spec.sweep);
  // instance id of each stage at each point (absent: excluded there by `only`)
  std::vector<std::map<std::string, std::string>> point_instances(points.size());
  std::map<std::string, size_t> instance_index;

  std::set<std::string> processed;  // stages already expanded (they come before their dependants)
  for (const auto& stage : spec.stages) {
    for (size_t p = 0; p < points.size(); ++p) {
      const SweepPoint& point = points[p];
      Resolver resolver(source, spec, point, builtins);
      if (!only_allows(resolver, stage, point, spec, source)) continue;
      // A stage whose input `only` left out at this point is left out with it (eval of grpo).
      if (std::any_of(stage.depends_on.begin(), stage.depends_on.end(),
                      [&](const auto& dep) { return !point_instances[p].count(dep); }))
        continue;

      std::set<std::string> used;
      std::vector<std::string> inputs;
      auto input_instance = [&](const std::string& name,
                                const LocatedValue& at) -> const StageInstance& {
        auto it = point_instances[p].find(name);
        if (it == point_instances[p].end())
          source.fail_at(
              at.path, at.node,
              processed.count(name)
                  ? fmt::format("needs stage '{}', which 'only' leaves out at this sweep point",
                                name)
                  : fmt::format("refers to stage '{}', which is not among the stages this one "
                                "depends on (name it in `inputs` or use ${{stage:{}}} in args)",
                                name, name));
        const StageInstance& input = plan.stages[instance_index.at(it->second)];
        if (std::find(inputs.begin(), inputs.end(), input.id) == inputs.end())
          inputs.push_back(input.id);
        for (const auto& [key, value] : input.point) used.insert(key);
        return input;
      };
      const LocatedValue* current = &stage.key;
      resolver.stage_dir = [&](const std::string& name) {
        return input_instance(name, *current).out_dir.string();
      };
      resolver.used = &used;

      StageInstance instance;
      instance.stage = stage.name;
      instance.location = source.where(stage.key.path, stage.key.node);
      current = &stage.tool;
      instance.tool = resolver.text(stage.tool);
      {
        std::istringstream words(instance.tool);
        std::string word;
        std::vector<std::string> parts;
        while (words >> word) parts.push_back(word);
        if (parts.empty() ||
            std::find(kPrograms.begin(), kPrograms.end(), parts[0]) == kPrograms.end())
          source.fail_at(
              stage.tool.path, stage.tool.node,
              fmt::format("unknown tool '{}' (expected one of: {}; rqat takes a subcommand)",
                          instance.tool, fmt::join(kPrograms, ", ")));
        if ((parts[0] == "rqat") != (parts.size() == 2) || parts.size() > 2)
          source.fail_at(stage.tool.path, stage.tool.node,
                         parts[0] == "rqat" ? "'rqat' needs one subcommand, e.g. 'rqat traces'"
                                            : "a tool is one word (only rqat takes a subcommand)");
        instance.program = parts[0];
        if (parts.size() == 2) instance.argv.push_back(parts[1]);
      }

      // Defaults of the tool, then the stage's own arguments (which win, in the defaults' place).
      NamedValues args;
      if (auto it = spec.defaults.find(instance.tool); it != spec.defaults.end()) args = it->second;
      for (const auto& [key, value] : stage.args) {
        auto same =
            std::find_if(args.begin(), args.end(), [&](const auto& a) { return a.first == key; });
        if (same != args.end())
          same->second = value;
        else
          args.emplace_back(key, value);
      }
      for (const auto& [flag, value] : stage.inputs) {
        current = &value;
        const auto& input = input_instance(value.node.Scalar(), value);
        instance.argv.push_back("--" + flag);
        instance.argv.push_back(input.out_dir.string());
      }
      bool explicit_out = false;
      for (const auto& [flag, value] : args) {
        current = &value;
        if (flag == "out") explicit_out = true;
        const Value v = resolver.value(value);
        if (v.boolean) {
          if (*v.boolean) instance.argv.push_back("--" + flag);
          continue;
        }
        for (const auto& item : v.items) {
          instance.argv.push_back("--" + flag);
          instance.argv.push_back(item);
          if (kInputPathKeys.count(flag) && !item.empty() && !inside(item, plan.run_dir) &&
              !std::filesystem::exists(item))
            instance.missing_paths.push_back(
                fmt::format("{}: {}", source.where(value.path, value.node).to_string(), item));
        }
      }
      std::vector<std::string> positional;
      for (const auto& value : stage.positional) {
        current = &value;
        positional.push_back(resolver.text(value));
        const auto& item = positional.back();
        if (!inside(item, plan.run_dir) && !std::filesystem::exists(item))
          instance.missing_paths.push_back(
              fmt::format("{}: {}", source.where(value.path, value.node).to_string(), item));
      }

      // The id: the stage and the sweep variables it depends on, in sweep order.
      instance.id = stage.name;
      for (const auto& [key, value] : point) {
        if (!used.count(key)) continue;
        instance.point.emplace_back(key, value);
        instance.id += "." + id_component(key) + "-" + id_component(value);
      }
      instance.out_dir = plan.run_dir / instance.id;
      if (!explicit_out) {
        instance.argv.push_back("--out");
        instance.argv.push_back(instance.out_dir.string());
      }
      instance.argv.insert(instance.argv.end(), positional.begin(), positional.end());
      instance.inputs = inputs;

      resolver.used = nullptr;  // labels and resources do not make instances different
      instance.label = stage.label ? resolver.text(*stage.label) : instance.id;
      apply_resources(source, resolver, spec.slurm_default, instance.resources);
      if (auto it = spec.slurm_tools.find(instance.tool); it != spec.slurm_tools.end())
        apply_resources(source, resolver, it->second, instance.resources);
      else if (auto it2 = spec.slurm_tools.find(instance.program); it2 != spec.slurm_tools.end())
        apply_resources(source, resolver, it2->second, instance.resources);
      apply_resources(source, resolver, stage.resources, instance.resources);

      if (auto it = instance_index.find(instance.id); it != instance_index.end()) {
        const StageInstance& existing = plan.stages[it->second];
        if (existing.argv != instance.argv || existing.program != instance.program)
          source.fail_at(
              stage.key.path, stage.key.node,
              fmt::format("two sweep points give stage instance '{}' different commands; "
                          "sweep values that differ only in characters other than letters, "
                          "digits, '.', '-', '_' and '+' collide in directory names",
                          instance.id));
        point_instances[p][stage.name] = instance.id;
        continue;
      }
      instance_index[instance.id] = plan.stages.size();
      point_instances[p][stage.name] = instance.id;
      plan.stages.push_back(std::move(instance));
    }
    processed.insert(stage.name);
  }
  // Two instances writing one place would overwrite each other (an explicit `out` that does not
  // mention the sweep variables that tell them apart).
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
  return plan;
}

}  // namespace rqat::experiment

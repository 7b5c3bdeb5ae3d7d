#include "experiment/experiment_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "io/error.h"
#include "io/json_fields.h"

namespace rqat::experiment {

std::string SourceLocation::to_string() const {
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

const StageInstance* ExperimentPlan::find(const std::string& id) const {
  for (const auto& stage : stages)
    if (stage.id == id) return &stage;
  return nullptr;
}

std::string ResourceField::value_text(const SlurmResources& r) const {
  return number ? std::to_string(r.*number) : r.*text;
}

const std::vector<ResourceField>& slurm_resource_fields() {
  static const std::vector<ResourceField> fields = {
      {"nodes", &SlurmResources::nodes},
      {"gpus", &SlurmResources::gpus},
      {"cpus", &SlurmResources::cpus},
      {"gpu_memory_gb", &SlurmResources::gpu_memory_gb},
      {"signal_seconds", &SlurmResources::signal_seconds},
      {"requeue", &SlurmResources::requeue},
      {"time", nullptr, &SlurmResources::time},
      {"mem", nullptr, &SlurmResources::mem},
      {"partition", nullptr, &SlurmResources::partition},
      {"account", nullptr, &SlurmResources::account},
      {"constraint", nullptr, &SlurmResources::constraint},
      {"qos", nullptr, &SlurmResources::qos}};
  return fields;
}

std::string point_value(const StageInstance& instance, const std::string& variable) {
  for (const auto& [name, value] : instance.point)
    if (name == variable) return value;
  return "";
}

bool instance_matches(const StageInstance& instance,
                      const std::vector<std::pair<std::string, std::string>>& where) {
  return std::all_of(where.begin(), where.end(), [&](const auto& condition) {
    return std::find(instance.point.begin(), instance.point.end(), condition) !=
           instance.point.end();
  });
}

bool takes_resume(const StageInstance& stage) {
  return stage.program == "qat-sft" || stage.program == "qat-kd" || stage.program == "grpo";
}

namespace {

io::Json resources_to_json(const SlurmResources& r) {
  io::Json j = io::Json::object();
  for (const auto& field : slurm_resource_fields()) {
    if (field.number)
      j[field.name] = r.*field.number;
    else
      j[field.name] = r.*field.text;
  }
  return j;
}

// Absent fields keep SlurmResources' defaults.
SlurmResources resources_from_json(const io::Json& j, const std::string& path) {
  SlurmResources r;
  for (const auto& field : slurm_resource_fields()) {
    if (field.number)
      r.*field.number =
          static_cast<int>(io::json_field_or<int64_t>(j, field.name, r.*field.number, path));
    else
      r.*field.text = io::json_field_or<std::string>(j, field.name, r.*field.text, path);
  }
  return r;
}

io::Json arm_to_json(const FindingArm& arm) {
  io::Json where = io::Json::object();
  for (const auto& [key, value] : arm.where) where[key] = value;
  return {{"stage", arm.stage}, {"where", where}};
}

FindingArm arm_from_json(const io::Json& j, const std::string& path) {
  FindingArm arm;
  arm.stage = io::json_field<std::string>(j, "stage", path);
  arm.where = io::json_string_map(j, "where", path);
  return arm;
}

}  // namespace

io::Json plan_to_json(const ExperimentPlan& plan) {
  io::Json stages = io::Json::array();
  for (const auto& s : plan.stages) {
    io::Json point = io::Json::object();
    for (const auto& [key, value] : s.point) point[key] = value;
    stages.push_back({{"id", s.id},
                      {"stage", s.stage},
                      {"tool", s.tool},
                      {"program", s.program},
                      {"argv", s.argv},
                      {"out_dir", s.out_dir.string()},
                      {"inputs", s.inputs},
                      {"point", point},
                      {"label", s.label},
                      {"resources", resources_to_json(s.resources)},
                      {"location", s.location.to_string()},
                      {"missing_paths", s.missing_paths}});
  }
  io::Json findings = io::Json::array();
  for (const auto& f : plan.findings)
    findings.push_back({{"name", f.name},
                        {"claim", f.claim},
                        {"metric", f.metric},
                        {"higher", arm_to_json(f.higher)},
                        {"lower", arm_to_json(f.lower)}});
  return {{"name", plan.name},
          {"description", plan.description},
          {"experiment_file", plan.experiment_file.string()},
          {"run_dir", plan.run_dir.string()},
          {"sweep_variables", plan.sweep_variables},
          {"seed_variable", plan.seed_variable},
          {"slurm_setup", plan.slurm_setup},
          {"stages", stages},
          {"findings", findings}};
}

ExperimentPlan plan_from_json(const io::Json& json) {
  // Every field through io/json_fields.h: a plan.json of the wrong shape names the field.
  using io::json_field;
  using io::json_field_or;
  ExperimentPlan plan;
  plan.name = json_field<std::string>(json, "name", "");
  plan.description = json_field_or<std::string>(json, "description", "", "");
  plan.experiment_file = json_field<std::string>(json, "experiment_file", "");
  plan.run_dir = json_field<std::string>(json, "run_dir", "");
  plan.sweep_variables = json_field<std::vector<std::string>>(json, "sweep_variables", "");
  plan.seed_variable = json_field_or<std::string>(json, "seed_variable", "", "");
  plan.slurm_setup = json_field_or<std::vector<std::string>>(json, "slurm_setup", {}, "");
  const io::Json stages = json_field<io::Json>(json, "stages", "");
  if (!stages.is_array()) fail("stages: expected an array, got a {}", stages.type_name());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const io::Json& j = stages[i];
    const std::string at = io::json_path("stages", i);
    StageInstance s;
    s.id = json_field<std::string>(j, "id", at);
    s.stage = json_field<std::string>(j, "stage", at);
    s.tool = json_field<std::string>(j, "tool", at);
    s.program = json_field<std::string>(j, "program", at);
    s.argv = json_field<std::vector<std::string>>(j, "argv", at);
    s.out_dir = json_field<std::string>(j, "out_dir", at);
    s.inputs = json_field<std::vector<std::string>>(j, "inputs", at);
    s.point = io::json_string_map(j, "point", at, io::JsonPresence::kRequired);
    s.label = json_field_or<std::string>(j, "label", s.id, at);
    s.resources =
        resources_from_json(json_field_or<io::Json>(j, "resources", io::Json::object(), at),
                            io::json_path(at, "resources"));
    s.location.file = json_field_or<std::string>(j, "location", "", at);
    s.missing_paths = json_field_or<std::vector<std::string>>(j, "missing_paths", {}, at);
    plan.stages.push_back(std::move(s));
  }
  const io::Json findings = json_field_or<io::Json>(json, "findings", io::Json::array(), "");
  if (!findings.is_array()) fail("findings: expected an array, got a {}", findings.type_name());
  for (std::size_t i = 0; i < findings.size(); ++i) {
    const io::Json& j = findings[i];
    const std::string at = io::json_path("findings", i);
    Finding f;
    f.name = json_field<std::string>(j, "name", at);
    f.claim = json_field_or<std::string>(j, "claim", "", at);
    f.metric = json_field_or<std::string>(j, "metric", f.metric, at);
    f.higher = arm_from_json(json_field<io::Json>(j, "higher", at), io::json_path(at, "higher"));
    f.lower = arm_from_json(json_field<io::Json>(j, "lower", at), io::json_path(at, "lower"));
    plan.findings.push_back(std::move(f));
  }
  return plan;
}

void write_plan(const std::filesystem::path& file, const ExperimentPlan& plan) {
  io::write_json_file(file, plan_to_json(plan));
}

ExperimentPlan read_plan(const std::filesystem::path& file) {
  try {
    return plan_from_json(io::read_json_file(file));
  } catch (const Error& e) {
    fail("{}: {}", file.string(), e.what());
  }
}

}  // namespace rqat::experiment

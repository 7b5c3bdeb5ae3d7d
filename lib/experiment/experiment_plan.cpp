#include "experiment/experiment_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "io/error.h"

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
SlurmResources resources_from_json(const io::Json& j) {
  SlurmResources r;
  for (const auto& field : slurm_resource_fields()) {
    if (field.number)
      r.*field.number = j.value(field.name, r.*field.number);
    else
      r.*field.text = j.value(field.name, r.*field.text);
  }
  return r;
}

io::Json arm_to_json(const FindingArm& arm) {
  io::Json where = io::Json::object();
  for (const auto& [key, value] : arm.where) where[key] = value;
  return {{"stage", arm.stage}, {"where", where}};
}

FindingArm arm_from_json(const io::Json& j) {
  FindingArm arm;
  arm.stage = j.at("stage").get<std::string>();
  const io::Json where = j.value("where", io::Json::object());  // items() needs it alive
  for (const auto& [key, value] : where.items()) arm.where.emplace_back(key, value.get<std::string>());
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
  ExperimentPlan plan;
  try {
    plan.name = json.at("name").get<std::string>();
    plan.description = json.value("description", "");
    plan.experiment_file = json.at("experiment_file").get<std::string>();
    plan.run_dir = json.at("run_dir").get<std::string>();
    plan.sweep_variables = json.at("sweep_variables").get<std::vector<std::string>>();
    plan.seed_variable = json.value("seed_variable", "");
    plan.slurm_setup = json.value("slurm_setup", std::vector<std::string>{});
    for (const auto& j : json.at("stages")) {
      StageInstance s;
      s.id = j.at("id").get<std::string>();
      s.stage = j.at("stage").get<std::string>();
      s.tool = j.at("tool").get<std::string>();
      s.program = j.at("program").get<std::string>();
      s.argv = j.at("argv").get<std::vector<std::string>>();
      s.out_dir = j.at("out_dir").get<std::string>();
      s.inputs = j.at("inputs").get<std::vector<std::string>>();
      for (const auto& [key, value] : j.at("point").items())
        s.point.emplace_back(key, value.get<std::string>());
      s.label = j.value("label", s.id);
      s.resources = resources_from_json(j.value("resources", io::Json::object()));
      s.location.file = j.value("location", "");
      s.missing_paths = j.value("missing_paths", std::vector<std::string>{});
      plan.stages.push_back(std::move(s));
    }
    const io::Json findings = json.value("findings", io::Json::array());
    for (const auto& j : findings) {
      Finding f;
      f.name = j.at("name").get<std::string>();
      f.claim = j.value("claim", "");
      f.metric = j.value("metric", f.metric);
      f.higher = arm_from_json(j.at("higher"));
      f.lower = arm_from_json(j.at("lower"));
      plan.findings.push_back(std::move(f));
    }
  } catch (const io::Json::exception& e) {
    fail("plan.json: {}", e.what());
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

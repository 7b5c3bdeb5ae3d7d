// See memory_preview.h.
#include "experiment/memory_preview.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "experiment/stage_process.h"

namespace rqat::experiment {

namespace {

// The stage flags `rqat plan-memory` reads, spelt as the tools spell them. A flag in `kSwitches`
// takes no value; a repeated flag (a list) is passed on repeated.
const std::set<std::string> kCommonFlags = {"--shard", "--dtype", "--micro-batch-size",
                                            "--activation-checkpointing"};
const std::set<std::string> kQatFlags = {"--batch-size", "--max-length", "--bits"};
const std::set<std::string> kGrpoFlags = {"--mode",
                                          "--lora-rank",
                                          "--lora-target-modules",
                                          "--prompts-per-step",
                                          "--num-generations",
                                          "--max-new-tokens",
                                          "--minibatches",
                                          "--kl-beta"};
const std::set<std::string> kSwitches = {"--activation-checkpointing"};

bool is_flag(const std::string& arg) { return arg.size() > 2 && arg.compare(0, 2, "--") == 0; }

// The values of `flag` in an argument list (`rqat run` writes "--flag value" pairs, a list as the
// flag repeated, a switch bare).
std::vector<std::string> values_of(const std::vector<std::string>& argv, const std::string& flag) {
  std::vector<std::string> values;
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag && !is_flag(argv[i + 1])) values.push_back(argv[i + 1]);
  return values;
}

// A model directory with a config.json: `dir` itself, or, while `dir` is an earlier stage's output
// not written yet, the --model that stage reads (ptq, qat and grpo keep the architecture).
std::string config_dir(const ExperimentPlan& plan, std::string dir) {
  for (size_t hops = 0; hops <= plan.stages.size(); ++hops) {
    if (std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json")) return dir;
    const auto producer = std::find_if(plan.stages.begin(), plan.stages.end(),
                                       [&](const StageInstance& s) { return s.out_dir == dir; });
    if (producer == plan.stages.end()) return dir;
    const auto models = values_of(producer->argv, "--model");
    if (models.empty()) return dir;
    dir = models.front();
  }
  return dir;
}

bool is_training(const StageInstance& stage) {
  return stage.program == "qat-sft" || stage.program == "qat-kd" || stage.program == "grpo";
}

std::string indented(const std::string& text, const std::string& indent) {
  std::istringstream lines(text);
  std::string out, line;
  while (std::getline(lines, line))
    if (!line.empty()) out += indent + line + "\n";
  return out;
}

}  // namespace

std::vector<std::string> plan_memory_args(const ExperimentPlan& plan, const StageInstance& stage) {
  const SlurmResources& r = stage.resources;
  if (!is_training(stage) || r.gpus <= 0) return {};
  std::vector<std::string> args = {"plan-memory", "--tool", stage.program, "--world-size",
                                   std::to_string(std::max(1, r.nodes) * r.gpus)};
  if (r.gpu_memory_gb > 0) {
    args.push_back("--gpu-memory");
    args.push_back(std::to_string(r.gpu_memory_gb));
  }
  for (const auto& model : values_of(stage.argv, "--model")) {
    args.push_back("--model");
    args.push_back(config_dir(plan, model));
  }
  if (stage.program == "qat-kd")
    for (const auto& teacher : values_of(stage.argv, "--teacher")) {
      args.push_back("--teacher");
      args.push_back(config_dir(plan, teacher));
    }
  const auto& tool_flags = stage.program == "grpo" ? kGrpoFlags : kQatFlags;
  for (size_t i = 0; i < stage.argv.size(); ++i) {
    const std::string& flag = stage.argv[i];
    if (!kCommonFlags.count(flag) && !tool_flags.count(flag)) continue;
    args.push_back(flag);
    if (!kSwitches.count(flag) && i + 1 < stage.argv.size()) args.push_back(stage.argv[++i]);
  }
  return args;
}

std::string stage_memory_plan(const ExperimentPlan& plan, const StageInstance& stage,
                              const std::filesystem::path& bin_dir, const std::string& indent,
                              std::map<std::vector<std::string>, std::string>& cache) {
  auto args = plan_memory_args(plan, stage);
  if (args.empty()) return "";
  const auto cached = cache.find(args);
  if (cached != cache.end()) return cached->second;
  const auto rqat = bin_dir / "rqat";
  std::string text;
  if (access(rqat.c_str(), X_OK) != 0) {
    text = indent + fmt::format("memory plan: no rqat in {}\n", bin_dir.string());
  } else {
    std::vector<std::string> command = {rqat.string()};
    command.insert(command.end(), args.begin(), args.end());
    const CapturedRun run = run_captured(command);
    if (run.started && run.exit_code == 0) {
      text = indented(run.out + run.err, indent);
    } else {
      // The planner's one-line error (a model that is not there yet, a flag it rejects).
      std::string why = run.started ? run.err : "cannot start: " + run.err;
      why = why.substr(0, why.find('\n'));
      const std::string prefix = "rqat plan-memory: error: ";
      if (why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
      text = indent + "memory plan: not made: " + why + "\n";
    }
  }
  cache.emplace(std::move(args), text);
  return text;
}

}  // namespace rqat::experiment

#include "experiment/tool_flags.h"

#include <fmt/format.h>

#include <map>
#include <regex>

#include "experiment/stage_process.h"
#include "io/error.h"

namespace rqat::experiment {

std::set<std::string> read_tool_flags(const std::filesystem::path& program,
                                      const std::string& subcommand) {
  std::vector<std::string> args{program.string()};
  if (!subcommand.empty()) args.push_back(subcommand);
  args.push_back("--help");
  const auto run = run_captured(args);
  if (!run.started || run.exit_code != 0)
    fail("{}: `--help` {}", fmt::join(args.begin(), args.end() - 1, " "),
         run.started ? fmt::format("exited with {}", run.exit_code) : "cannot start: " + run.err);
  // CLI11 lists options as "  -j,--jobs INT ..." or "  --dry-run ..."; any --name in the text
  // counts, which can only make the check more lenient.
  std::set<std::string> flags;
  static const std::regex flag(R"(--[A-Za-z0-9][A-Za-z0-9_-]*)");
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), flag);
       it != std::sregex_iterator(); ++it)
    flags.insert(it->str());
  return flags;
}

void check_stage_flags(const ExperimentPlan& plan, const std::filesystem::path& bin_dir) {
  std::map<std::pair<std::string, std::string>, std::set<std::string>> known;
  for (const auto& stage : plan.stages) {
    const bool has_subcommand = stage.program == "rqat" && !stage.argv.empty();
    const std::string subcommand = has_subcommand ? stage.argv.front() : "";
    const auto key = std::make_pair(stage.program, subcommand);
    if (!known.count(key)) known[key] = read_tool_flags(bin_dir / stage.program, subcommand);
    const auto& flags = known[key];
    for (size_t i = has_subcommand ? 1 : 0; i < stage.argv.size(); ++i) {
      const auto& arg = stage.argv[i];
      if (arg.rfind("--", 0) != 0) continue;
      if (!flags.count(arg))
        fail("{}: stage {}: {} has no flag {} (see `{} --help`)", stage.location.to_string(),
             stage.id, stage.tool, arg, stage.tool);
      // A value that happens to start with "--" follows a flag that takes one: skip it.
      if (i + 1 < stage.argv.size() && stage.argv[i + 1].rfind("--", 0) == 0 &&
          !flags.count(stage.argv[i + 1]))
        ++i;
    }
  }
}

}  // namespace rqat::experiment

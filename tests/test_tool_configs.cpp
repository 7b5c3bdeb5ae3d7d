// Every tool's configuration is one declaration (cli/*_config.h): each declared option is a flag
// in the tool's --help, is in the resume fingerprint unless it is run control, and is in the
// manifest's record of the options. Checked on the declarations for every tool, and on the files
// real ptq and qat-sft runs write.
#include "catch.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/eval_config.h"
#include "cli/grpo_config.h"
#include "cli/ptq_config.h"
#include "cli/qat_config.h"
#include "io/json_file.h"
#include "test_util.h"
#include "tools/ptq_command.h"
#include "tools/qat_command.h"

using namespace rqat;

namespace {

// Whether `help` lists `flag` as a whole word ("--bits" but not "--bits-x").
bool lists_flag(const std::string& help, const std::string& flag) {
  for (size_t at = help.find(flag); at != std::string::npos; at = help.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    const bool starts = at == 0 || help[at - 1] == ' ' || help[at - 1] == ',';
    const bool ends = end == help.size() || !(std::isalnum(static_cast<unsigned char>(help[end])) ||
                                              help[end] == '-' || help[end] == '_');
    if (starts && ends) return true;
  }
  return false;
}

// The declaration of `config` against its --help, its settings and its record of every option.
template <class Config>
void check_declaration(Config& config, const std::string& tool) {
  INFO(tool);
  CLI::App app(tool);
  cli::add_config_flags(app, config);
  const std::string help = app.help();
  const auto declared = io::declared_options(config);
  const io::Json settings = io::settings_json(config);
  const io::Json options = io::options_json(config);
  REQUIRE(declared.size() >= 10);
  std::set<std::string> names;
  size_t run_control = 0;
  for (const auto& option : declared) {
    INFO("option " << option.name);
    CHECK(names.insert(option.name).second);  // one flag, one declaration
    CHECK(lists_flag(help, option.form.positional ? option.name : "--" + option.name));
    const std::string key = io::option_key(option.name);
    CHECK(options.contains(key));
    if (option.role == io::Role::kSetting) {
      CHECK(settings.contains(key));
    } else {
      CHECK_FALSE(settings.contains(key));
      ++run_control;
    }
  }
  // Nothing but the declared options, and both roles used.
  CHECK(options.size() == declared.size());
  CHECK(settings.size() + run_control == declared.size());
  CHECK(run_control > 0);
}

// Parses `args` (after the program name) into `config` as the tool would.
template <class Config>
void parse(Config& config, std::vector<std::string> args) {
  CLI::App app("test");
  cli::add_config_flags(app, config);
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector form in reverse order
  app.parse(args);
}

// Every declared option of `config` is a key of `record` (a manifest's "options").
template <class Config>
void check_recorded(const Config& config, const io::Json& record, bool settings_only) {
  for (const auto& option : io::declared_options(config)) {
    if (settings_only && option.role != io::Role::kSetting) continue;
    INFO("option " << option.name);
    CHECK(record.contains(io::option_key(option.name)));
  }
}

}  // namespace

TEST_CASE("every tool's declared options are flags, settings or run control, and recorded",
          "[options]") {
  cli::PtqConfig ptq;
  check_declaration(ptq, "ptq");
  cli::QatConfig sft(tools::QatObjective::kSft);
  check_declaration(sft, "qat-sft");
  cli::QatConfig kd(tools::QatObjective::kKd);
  check_declaration(kd, "qat-kd");
  cli::GrpoConfig grpo;
  check_declaration(grpo, "grpo");
  cli::EvalConfig eval;
  check_declaration(eval, "eval-math");
  // Distillation is qat-kd's only.
  CHECK(io::declared_options(kd).size() > io::declared_options(sft).size());
  CHECK_FALSE(io::options_json(sft).contains("divergence"));
  CHECK(io::options_json(kd).contains("divergence"));
}

TEST_CASE("a section's naming: prefixes, renames and skips reach every visitor", "[options]") {
  cli::PtqConfig ptq;
  const io::Json options = io::options_json(ptq);
  CHECK(options.contains("calib_field"));  // text-field, renamed and prefixed
  CHECK_FALSE(options.contains("text_field"));
  CHECK(options.contains("awq_grid"));
  cli::GrpoConfig grpo;
  const io::Json grpo_options = io::options_json(grpo);
  CHECK(grpo_options.contains("rollout_batch"));     // the engine's max-batch, renamed
  CHECK_FALSE(grpo_options.contains("batch_size"));  // the trainer's, skipped
  CHECK_FALSE(grpo_options.contains("clip"));        // ptq's quantization flag, not the trainers'
  // One home for bits: the trainers' spec holds it, 0 until given (the input's quant state).
  CHECK(grpo_options.at("bits") == 0);
  parse(grpo, {"--model", "m", "--out", "o", "--data", "d", "--bits", "3"});
  CHECK(grpo.resolve().spec.bits == 3);
}

TEST_CASE("ptq and qat-sft runs record every option; qat-sft fingerprints every setting",
          "[options][qat]") {
  test::TempDir dir("tool_configs");
  const auto model = test::write_byte_level_model(dir);
  {
    std::ofstream text(dir / "train.txt");
    for (int i = 0; i < 40; ++i) text << "The sum of " << i << " and 2 is " << i + 2 << ".\n\n";
  }

  cli::PtqConfig ptq;
  parse(ptq, {"--model", model.string(), "--out", (dir / "ptq").string(), "--method", "rtn",
              "--bits", "4", "--group-size", "-1", "--device", "cpu"});
  std::ostringstream log;
  tools::run_ptq_command(ptq.resolve(), log);
  const io::Json ptq_manifest = io::read_json_file(dir / "ptq" / "manifest.json");
  check_recorded(ptq, ptq_manifest.at("config").at("options"), false);
  CHECK(ptq_manifest["config"]["options"]["method"] == "rtn");

  cli::QatConfig sft(tools::QatObjective::kSft);
  parse(sft, {"--model", (dir / "ptq").string(), "--out", (dir / "qat").string(), "--data",
              (dir / "train.txt").string(), "--max-length", "32", "--steps", "1", "--batch-size",
              "2", "--device", "cpu", "--no-tensorboard"});
  auto options = sft.resolve();
  options.trainer.show_progress = false;
  REQUIRE(tools::run_qat_command(options, log).exit_code == 0);
  const io::Json manifest = io::read_json_file(dir / "qat" / "manifest.json");
  check_recorded(sft, manifest.at("config").at("options"), false);
  CHECK(manifest["config"]["options"]["bits"] == 0);  // as given: the ptq artifact's state
  CHECK(manifest["config"]["quant"]["bits"] == 4);    // as resolved
  // The checkpoint's fingerprint holds the settings, and no run control.
  std::optional<io::Json> fingerprint;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir / "qat"))
    if (entry.path().filename() == "trainer_state.json")
      fingerprint = io::read_json_file(entry.path()).at("fingerprint").at("options");
  REQUIRE(fingerprint);
  check_recorded(sft, *fingerprint, true);
  CHECK_FALSE(fingerprint->contains("out"));
  CHECK_FALSE(fingerprint->contains("threads"));

  // --resume: run control may change, a setting may not; a checkpoint from before the options
  // were recorded (no "options" in its fingerprint) still resumes.
  const auto resume = [&](std::vector<std::string> extra) {
    cli::QatConfig again(tools::QatObjective::kSft);
    std::vector<std::string> args = {"--model",
                                     (dir / "ptq").string(),
                                     "--out",
                                     (dir / "qat").string(),
                                     "--data",
                                     (dir / "train.txt").string(),
                                     "--max-length",
                                     "32",
                                     "--steps",
                                     "1",
                                     "--batch-size",
                                     "2",
                                     "--device",
                                     "cpu",
                                     "--no-tensorboard",
                                     "--resume"};
    args.insert(args.end(), extra.begin(), extra.end());
    parse(again, args);
    auto o = again.resolve();
    o.trainer.show_progress = false;
    return tools::run_qat_command(o, log);
  };
  test::require_error([&] { resume({"--seed", "7"}); }, {"--resume", "different"});
  std::filesystem::path state_file;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir / "qat"))
    if (entry.path().filename() == "trainer_state.json") state_file = entry.path();
  io::Json state = io::read_json_file(state_file);
  state["fingerprint"].erase("options");
  io::write_json_file(state_file, state);
  CHECK(resume({"--eval-tokens", "100"}).exit_code == 0);
}

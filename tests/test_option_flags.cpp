// CLI11 flags derived from an options declaration (cli/option_flags.h): names with a prefix and a
// tool's kept spellings, skipped options, enum values parsed through their name table with a
// one-line error, and the text-data options as ptq, the trainers and rqat nll offer them.
#include "catch.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/option_flags.h"
#include "data/text_dataset.h"

namespace {

using rqat::data::DataFormat;
using rqat::data::PlainTextSplit;
using rqat::data::TextDataOptions;

// Parses `args` (after the program name) into a fresh app holding `options`' flags.
void parse(TextDataOptions& options, rqat::cli::FlagSelection selection,
           std::vector<std::string> args) {
  CLI::App app("test");
  rqat::cli::add_option_flags(app, options, std::move(selection));
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector form in reverse order
  app.parse(args);
}

}  // namespace

TEST_CASE("option flags: prefix, kept spellings, enums and bools") {
  TextDataOptions o;
  parse(o, {.prefix = "calib-", .rename = {{"text-field", "field"}}},
        {"--calib-format", "jsonl", "--calib-split", "whole-file", "--calib-field", "body",
         "--calib-chat", "--calib-prompt-field", "q", "--calib-system-prompt", "Be brief."});
  CHECK(o.format == DataFormat::kJsonl);
  CHECK(o.split == PlainTextSplit::kWholeFile);
  CHECK(o.text_field == "body");
  CHECK(o.use_chat_template);
  CHECK(o.prompt_field == "q");
  CHECK(o.response_field == "response");  // untouched: the declared default
  CHECK(o.system_prompt == "Be brief.");
  CHECK(o.separator_line == TextDataOptions{}.separator_line);
}

TEST_CASE("option flags: the declared name is not offered where the tool renamed it") {
  TextDataOptions o;
  CHECK_THROWS_AS(parse(o, {.prefix = "calib-", .rename = {{"text-field", "field"}}},
                        {"--calib-text-field", "body"}),
                  CLI::ExtrasError);
  // rqat nll: no prefix, --field and --system.
  parse(o, {.rename = {{"text-field", "field"}, {"system-prompt", "system"}}},
        {"--field", "t", "--system", "S", "--split", "separator", "--separator", "----"});
  CHECK(o.text_field == "t");
  CHECK(o.system_prompt == "S");
  CHECK(o.split == PlainTextSplit::kSeparatorLine);
  CHECK(o.separator_line == "----");
}

TEST_CASE("option flags: skipped options are absent; a bad enum value names the flag") {
  TextDataOptions o;
  CHECK_THROWS_AS(parse(o, {.skip = {"chat"}}, {"--chat"}), CLI::ExtrasError);
  try {
    parse(o, {.rename = {{"format", "data-format"}}}, {"--data-format", "csv"});
    FAIL("--data-format csv was accepted");
  } catch (const CLI::ValidationError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("--data-format: unknown value 'csv'") &&
                            Catch::Contains("(expected auto, text or jsonl)"));
  }
  CHECK(o.format == DataFormat::kAuto);
}

namespace {

// A declaration using every flag form (io::FlagForm) and a nested, prefixed section.
struct FormOptions {
  std::string file;
  int jobs = 1;
  int watch = 0;
  bool graphs = true;
  std::string name;
  TextDataOptions data;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using rqat::io::Role;
    v.value(self.file, "file", "Input", Role::kSetting, {.required = true, .positional = true});
    v.value(self.jobs, "jobs", "Jobs", Role::kRunControl, {.alias = "j"});
    v.value(self.watch, "watch", "Seconds", Role::kRunControl, {.implicit = "10"});
    v.value(self.graphs, "graphs", "Graphs", Role::kRunControl, {.negation = "no-graphs"});
    v.value(self.name, "run-dir", "Directory", Role::kRunControl, {.alias = "out"});
    rqat::io::section(v, "Data", self.data, {.prefix = "d-", .skip = {"chat"}});
  }
};

FormOptions parse_forms(std::vector<std::string> args) {
  FormOptions o;
  CLI::App app("test");
  rqat::cli::add_option_flags(app, o);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  return o;
}

}  // namespace

TEST_CASE("option flags: positional, required, aliases, implicit values, negations, sections") {
  auto o = parse_forms(
      {"in.jsonl", "-j", "3", "--watch", "--no-graphs", "--out", "r", "--d-format", "jsonl"});
  CHECK(o.file == "in.jsonl");
  CHECK(o.jobs == 3);
  CHECK(o.watch == 10);  // given alone
  CHECK_FALSE(o.graphs);
  CHECK(o.name == "r");
  CHECK(o.data.format == DataFormat::kJsonl);
  o = parse_forms({"in.jsonl", "--jobs", "2", "--watch", "4", "--run-dir", "s"});
  CHECK((o.jobs == 2 && o.watch == 4 && o.graphs && o.name == "s"));
  CHECK_THROWS_AS(parse_forms({"--jobs", "2"}), CLI::RequiredError);  // no file
  CHECK_THROWS_AS(parse_forms({"f", "--d-chat"}), CLI::ExtrasError);  // skipped in the section
  // The JSON visitors see the same names, without the flag forms.
  const auto json = rqat::io::options_json(FormOptions{});
  CHECK(json.contains("run_dir"));
  CHECK(json.contains("d_format"));
  CHECK_FALSE(json.contains("d_chat"));
  CHECK_FALSE(rqat::io::settings_json(FormOptions{}).contains("jobs"));
  // --help lists the section under its title.
  FormOptions help_options;
  CLI::App app("test");
  rqat::cli::add_option_flags(app, help_options);
  const std::string help = app.help();
  CHECK(help.find("Data:") != std::string::npos);
  CHECK(help.find("--d-format") > help.find("Data:"));
}

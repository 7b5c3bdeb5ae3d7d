// CLI11 flags derived from an options declaration (cli/option_flags.h): names with a prefix and a
// tool's kept spellings, skipped options, enum values parsed through their name table with a
// one-line error, and the text-data options as ptq, the trainers and rqat nll offer them.
#include <catch2/catch.hpp>

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

// The enum name tables (io/enum_names.h): the helpers on a local enum (choices, one-line parse
// errors, the order check, a value without a name), and every user-facing table: each name parses
// back to its value through the enum's own parse function, and a bad value fails with the one
// message form naming the flag, the text and the choices.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "chat/chat_template.h"
#include "data/text_dataset.h"
#include "data/training_batches.h"
#include "generation/generation_engine.h"
#include "io/enum_names.h"
#include "io/error.h"
#include "model/model_config.h"
#include "quant/fake_quant_linear.h"
#include "quant/gptq_packing.h"
#include "quant/ptq.h"
#include "rl/grpo_objective.h"
#include "test_util.h"
#include "tools/grpo_command.h"
#include "train/distill_loss.h"
#include "train/distributed.h"
#include "train/lr_schedule.h"
#include "train/qat_model.h"

namespace {

using rqat::EnumName;
using rqat::test::require_error;

enum class Color { kRed, kGreen, kBlue, kCount };
constexpr EnumName<Color> kColorNames[] = {
    {Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}};
static_assert(rqat::enum_table_complete(kColorNames));
static_assert(rqat::enum_name(kColorNames, Color::kGreen) == "green");

constexpr EnumName<Color> kSwapped[] = {
    {Color::kGreen, "green"}, {Color::kRed, "red"}, {Color::kBlue, "blue"}};
static_assert(!rqat::enum_table_in_order(kSwapped));
constexpr EnumName<Color> kTwice[] = {
    {Color::kRed, "red"}, {Color::kGreen, "red"}, {Color::kBlue, "blue"}};
static_assert(!rqat::enum_table_in_order(kTwice));
constexpr EnumName<Color> kUnnamed[] = {{Color::kRed, "red"}, {Color::kGreen, ""}};
static_assert(!rqat::enum_table_in_order(kUnnamed));
// A table missing the last enumerator is in order but not complete.
constexpr EnumName<Color> kShort[] = {{Color::kRed, "red"}, {Color::kGreen, "green"}};
static_assert(rqat::enum_table_in_order(kShort));
static_assert(!rqat::enum_table_complete(kShort));
static_assert(!rqat::enum_table_complete(kSwapped));

enum class One { kOnly, kCount };
constexpr EnumName<One> kOneNames[] = {{One::kOnly, "only"}};
enum class Two { kA, kB, kCount };
constexpr EnumName<Two> kTwoNames[] = {{Two::kA, "a"}, {Two::kB, "b"}};

// The message of the rqat::Error fn throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const rqat::Error& e) {
    return e.what();
  }
  return "";
}

// Every name of `table` parses back to its value through `parse`, and `name` gives it back.
template <class E, size_t N, class Parse, class Name>
void check_round_trip(const EnumName<E> (&table)[N], Parse parse, Name name) {
  for (const auto& entry : table) {
    INFO(entry.name);
    CHECK(parse(std::string(entry.name)) == entry.value);
    CHECK(std::string(name(entry.value)) == entry.name);
  }
}

}  // namespace

TEST_CASE("enum tables: choices, parse errors, names") {
  CHECK(rqat::enum_choices(kColorNames) == "red, green or blue");
  CHECK(rqat::enum_choices(kTwoNames) == "a or b");
  CHECK(rqat::enum_choices(kOneNames) == "only");
  CHECK(rqat::enum_name_list(kColorNames) == std::vector<std::string>{"red", "green", "blue"});
  CHECK(rqat::parse_enum(kColorNames, "blue", "--color") == Color::kBlue);
  CHECK(error_of([] { rqat::parse_enum(kColorNames, "Blue", "--color"); }) ==
        "--color: unknown value 'Blue' (expected red, green or blue)");
  CHECK(error_of([] { rqat::parse_enum(kColorNames, "", "cfg.json:color"); }) ==
        "cfg.json:color: unknown value '' (expected red, green or blue)");
  // A value outside the table is a programming error, not a user-facing one.
  CHECK_THROWS_AS(rqat::enum_name(kColorNames, Color::kCount), std::logic_error);
  CHECK_THROWS_AS(rqat::enum_name(kColorNames, static_cast<Color>(-1)), std::logic_error);
}

TEST_CASE("every user-facing enum parses its own names and names its values") {
  using namespace rqat;
  check_round_trip(
      data::kDataFormatNames, [](const std::string& s) { return data::parse_data_format(s, "f"); },
      data::format_name);
  check_round_trip(
      data::kPlainTextSplitNames,
      [](const std::string& s) { return data::parse_plain_text_split(s, "f"); },
      data::plain_text_split_name);
  check_round_trip(
      data::kSequenceLayoutNames,
      [](const std::string& s) { return data::parse_sequence_layout(s, "f"); },
      data::sequence_layout_name);
  check_round_trip(
      quant::kScaleModeNames, [](const std::string& s) { return quant::parse_scale_mode(s, "f"); },
      quant::scale_mode_name);
  check_round_trip(
      quant::kGptqFormatNames,
      [](const std::string& s) { return quant::parse_gptq_format(s, "f"); },
      quant::gptq_format_name);
  check_round_trip(
      quant::kPtqMethodNames, [](const std::string& s) { return quant::parse_ptq_method(s); },
      quant::ptq_method_name);
  check_round_trip(
      rl::kAdvantageModeNames,
      [](const std::string& s) { return rl::parse_advantage_mode(s, "f"); },
      rl::advantage_mode_name);
  check_round_trip(
      rl::kLossAggregationNames,
      [](const std::string& s) { return rl::parse_loss_aggregation(s, "f"); },
      rl::loss_aggregation_name);
  check_round_trip(
      train::kDistillDivergenceNames,
      [](const std::string& s) { return train::parse_distill_divergence(s, "f"); },
      train::distill_divergence_name);
  check_round_trip(
      train::kLrDecayNames, [](const std::string& s) { return train::parse_lr_decay(s, "f"); },
      train::lr_decay_name);
  check_round_trip(
      train::kCommBackendNames,
      [](const std::string& s) { return train::parse_comm_backend(s, "f"); },
      [](train::CommBackend b) { return enum_name(train::kCommBackendNames, b); });
  check_round_trip(
      train::kQuantInitNames, [](const std::string& s) { return train::parse_quant_init(s, "f"); },
      [](train::QuantInit i) { return enum_name(train::kQuantInitNames, i); });
  check_round_trip(
      tools::kPolicyModeNames,
      [](const std::string& s) { return tools::parse_policy_mode(s, "f"); },
      tools::policy_mode_name);
  CHECK(std::string(generation::finish_reason_name(generation::FinishReason::kStopString)) ==
        "stop_string");
  CHECK(std::string(model::family_name(model::Family::kLlama)) == "llama");
  CHECK(enum_choices(chat::kFormatNames) ==
        "chatml, qwen3, deepseek-r1, llama3, llama3.1 or custom");
}

TEST_CASE("bad enum values fail with one message form naming the flag, the text and the choices") {
  using namespace rqat;
  CHECK(error_of([] { quant::parse_scale_mode("x", "--scale-mode"); }) ==
        "--scale-mode: unknown value 'x' (expected frozen, lsq or clip)");
  CHECK(error_of([] { quant::parse_ptq_method("smoothquant"); }) ==
        "--method: unknown value 'smoothquant' (expected rtn, gptq or awq)");
  CHECK(error_of([] { quant::parse_gptq_format("marlin", "c.json:checkpoint_format"); }) ==
        "c.json:checkpoint_format: unknown value 'marlin' (expected gptq or gptq_v2)");
  // One spelling of the whole-file split, the one the flags document.
  CHECK(data::parse_plain_text_split("whole-file", "--split") == data::PlainTextSplit::kWholeFile);
  CHECK(error_of([] { data::parse_plain_text_split("whole_file", "--split"); }) ==
        "--split: unknown value 'whole_file' (expected paragraphs, whole-file or separator)");
  require_error([] { data::parse_data_format("csv", "--data-format"); },
                {"--data-format", "'csv'", "auto, text or jsonl"});
  require_error([] { train::parse_comm_backend("mpi", "--backend"); },
                {"--backend", "'mpi'", "auto, gloo or nccl"});
  require_error([] { tools::parse_policy_mode("lora", "--mode"); },
                {"--mode", "'lora'", "full, qat or qlora"});
}

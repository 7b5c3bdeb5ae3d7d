// The enum name tables (io/enum_names.h): the helpers on a local enum (choices, one-line parse
// errors, the table check, a value without a name), and every user-facing table: each name parses
// back to its value, and a bad value fails with the one message form naming the flag, the text
// and the choices.
#include "catch.h"

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

namespace color {
enum class Color { kRed, kGreen, kBlue, kCount };
constexpr rqat::EnumNames<Color> enum_names(Color) { return {"red", "green", "blue"}; }
enum class One { kOnly, kCount };
constexpr rqat::EnumNames<One> enum_names(One) { return {"only"}; }
enum class Two { kA, kB, kCount };
constexpr rqat::EnumNames<Two> enum_names(Two) { return {"a", "b"}; }
enum class Unnamed { kA, kCount };  // no table: not a NamedEnum
}  // namespace color

namespace {

using color::Color;
using rqat::test::require_error;
using Names3 = std::array<std::string_view, 3>;

static_assert(rqat::NamedEnum<Color>);
static_assert(!rqat::NamedEnum<color::Unnamed>);
static_assert(!rqat::NamedEnum<int>);
static_assert(rqat::enum_name(Color::kGreen) == "green");
static_assert(rqat::enum_names_valid(Names3{"red", "green", "blue"}));
// A table with a name missing (fewer initializers leave the rest empty), or a repeated name.
static_assert(!rqat::enum_names_valid(Names3{"red", "green"}));
static_assert(!rqat::enum_names_valid(Names3{"red", "", "blue"}));
static_assert(!rqat::enum_names_valid(Names3{"red", "green", "red"}));

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

// Every name of E parses back to its value, and the value names it.
template <class... E>
void check_round_trips() {
  (
      [] {
        for (size_t i = 0; i < static_cast<size_t>(E::kCount); ++i) {
          const auto value = static_cast<E>(i);
          const std::string name(rqat::enum_name(value));
          INFO(name);
          CHECK(!name.empty());
          CHECK(rqat::parse_enum<E>(name, "f") == value);
        }
      }(),
      ...);
}

}  // namespace

TEST_CASE("enum tables: choices, parse errors, names") {
  CHECK(rqat::enum_choices<Color>() == "red, green or blue");
  CHECK(rqat::enum_choices<color::Two>() == "a or b");
  CHECK(rqat::enum_choices<color::One>() == "only");
  CHECK(rqat::enum_name_list<Color>() == std::vector<std::string>{"red", "green", "blue"});
  CHECK(rqat::parse_enum<Color>("blue", "--color") == Color::kBlue);
  CHECK(error_of([] { rqat::parse_enum<Color>("Blue", "--color"); }) ==
        "--color: unknown value 'Blue' (expected red, green or blue)");
  CHECK(error_of([] { rqat::parse_enum<Color>("", "cfg.json:color"); }) ==
        "cfg.json:color: unknown value '' (expected red, green or blue)");
  // A value outside the table is a programming error, not a user-facing one.
  CHECK_THROWS_AS(rqat::enum_name(Color::kCount), std::logic_error);
  CHECK_THROWS_AS(rqat::enum_name(static_cast<Color>(-1)), std::logic_error);
}

TEST_CASE("every user-facing enum parses its own names and names its values") {
  using namespace rqat;
  check_round_trips<data::DataFormat, data::PlainTextSplit, data::SequenceLayout, quant::ScaleMode,
                    quant::GptqFormat, quant::PtqMethod, rl::AdvantageMode, rl::LossAggregation,
                    train::DistillDivergence, train::LrDecay, train::CommBackend, train::QuantInit,
                    tools::PolicyMode, tools::QatObjective, generation::FinishReason, model::Family,
                    chat::Format>();
  // Spellings that files and flags already use.
  CHECK(enum_name(generation::FinishReason::kStopString) == "stop_string");
  CHECK(enum_name(model::Family::kLlama) == "llama");
  CHECK(enum_name(tools::QatObjective::kKd) == "qat-kd");
  CHECK(enum_choices<chat::Format>() == "chatml, qwen3, deepseek-r1, llama3, llama3.1 or custom");
}

TEST_CASE("bad enum values fail with one message form naming the flag, the text and the choices") {
  using namespace rqat;
  CHECK(error_of([] { parse_enum<quant::ScaleMode>("x", "--scale-mode"); }) ==
        "--scale-mode: unknown value 'x' (expected frozen, lsq or clip)");
  CHECK(error_of([] { parse_enum<quant::PtqMethod>("smoothquant", "--method"); }) ==
        "--method: unknown value 'smoothquant' (expected rtn, gptq, awq or nf4)");
  CHECK(error_of([] { parse_enum<quant::GptqFormat>("marlin", "c.json:checkpoint_format"); }) ==
        "c.json:checkpoint_format: unknown value 'marlin' (expected gptq or gptq_v2)");
  // One spelling of the whole-file split, the one the flags document.
  CHECK(parse_enum<data::PlainTextSplit>("whole-file", "--split") ==
        data::PlainTextSplit::kWholeFile);
  CHECK(error_of([] { parse_enum<data::PlainTextSplit>("whole_file", "--split"); }) ==
        "--split: unknown value 'whole_file' (expected paragraphs, whole-file or separator)");
  require_error([] { parse_enum<data::DataFormat>("csv", "--data-format"); },
                {"--data-format", "'csv'", "auto, text or jsonl"});
  require_error([] { parse_enum<train::CommBackend>("mpi", "--backend"); },
                {"--backend", "'mpi'", "auto, gloo or nccl"});
  require_error([] { parse_enum<tools::PolicyMode>("lora", "--mode"); },
                {"--mode", "'lora'", "full, qat or qlora"});
}

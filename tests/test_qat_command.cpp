// run_qat_command end to end on a tiny random model with a byte-level tokenizer and a ChatML
// template: chat prompt/response data with the loss on responses, a periodic eval-math pass on a
// toy benchmark through the in-memory student, full-precision training with --bits 16, and the
// checks that refuse bad settings before any work.
#include "catch.h"

#include <fstream>
#include <sstream>

#include "io/json_file.h"
#include "model/init.h"
#include "model/model_dir.h"
#include "quant/quant_state.h"
#include "test_util.h"
#include "tools/qat_command.h"

using namespace rqat;

namespace {

tools::QatCommandOptions chat_options(const test::TempDir& dir,
                                      const std::filesystem::path& model) {
  std::ofstream(dir / "chat.jsonl") << R"({"q": "1+1?", "a": "2, so \\boxed{2}"})"
                                    << "\n"
                                    << R"({"q": "2+2?", "a": "it is \\boxed{4}"})"
                                    << "\n"
                                    << R"({"q": "3+3?", "a": "\\boxed{6}"})"
                                    << "\n"
                                    << R"({"q": "4+4?", "a": "eight: \\boxed{8}"})"
                                    << "\n";
  tools::QatCommandOptions o;
  o.model_dir = model;
  o.out_dir = dir / "out";
  o.spec.bits = 4;
  o.spec.group_size = -1;
  o.data.path = dir / "chat.jsonl";
  o.data.use_chat_template = true;
  o.data.prompt_field = "q";
  o.data.response_field = "a";
  o.sequences.layout = data::SequenceLayout::kBucketed;
  o.sequences.max_length = 64;
  o.trainer.steps = 3;
  o.trainer.batch_size = 2;
  o.trainer.lr.peak_lr = 1e-3;
  o.trainer.show_progress = false;
  return o;
}

}  // namespace

TEST_CASE("qat-sft on chat data with eval-math on a toy benchmark during training", "[qat]") {
  test::TempDir dir("qat_command_chat");
  const auto model = test::write_byte_level_model(dir);
  std::ofstream(dir / "toy.jsonl") << R"({"problem": "1+1?", "answer": "2"})"
                                   << "\n"
                                   << R"({"problem": "2+3?", "answer": "5"})"
                                   << "\n";
  auto o = chat_options(dir, model);
  o.eval_math_benchmark = "toy";
  o.eval_math_data = (dir / "toy.jsonl").string();
  o.eval_math_limit = 2;
  o.eval_math_max_new_tokens = 4;
  std::ostringstream log;
  const auto result = tools::run_qat_command(o, log);
  INFO(log.str());
  REQUIRE(result.exit_code == 0);
  CHECK(log.str().find("4 documents") != std::string::npos);
  const auto evals = test::metrics_rows(o.out_dir, "eval");
  REQUIRE(evals.size() == 2);  // before training and at the end
  for (const auto& row : evals) {
    CHECK(row.contains("math_accuracy"));
    CHECK(row["math_accuracy"].get<double>() >= 0.0);
  }
  CHECK(std::filesystem::exists(o.out_dir / "eval-math" / "step-00000000" / "samples.jsonl"));
  CHECK(std::filesystem::exists(o.out_dir / "eval-math" / "step-00000003" / "summary.json"));
  // The artifact: 4-bit quantized state for every block linear, manifest with the chat fields.
  const auto state = quant::load_quant_state(o.out_dir);
  CHECK(state.spec.bits == 4);
  CHECK(!state.layers.empty());
  const auto manifest = io::read_json_file(o.out_dir / "manifest.json");
  CHECK(manifest["tool"] == "qat-sft");
  CHECK(manifest["config"]["data"]["fields"]["response"] == "a");
  CHECK(manifest["config"]["init"] == "rtn");
}

TEST_CASE("--bits 16 trains in full precision and writes no quantized state", "[qat]") {
  test::TempDir dir("qat_command_fp");
  const auto model = test::write_byte_level_model(dir);
  auto o = chat_options(dir, model);
  o.spec.bits = 16;
  o.trainer.steps = 4;
  o.trainer.lr.peak_lr = 5e-3;
  std::ostringstream log;
  REQUIRE(tools::run_qat_command(o, log).exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(o.out_dir / quant::kQuantStateFile));
  const auto train_rows = test::metrics_rows(o.out_dir, "train");
  REQUIRE(train_rows.size() == 4);
  CHECK(train_rows.back()["loss"].get<double>() < train_rows.front()["loss"].get<double>());
}

TEST_CASE("qat settings are checked before training", "[qat]") {
  test::TempDir dir("qat_command_errors");
  const auto model = test::write_byte_level_model(dir);
  auto o = chat_options(dir, model);
  std::ostringstream log;
  auto too_long = o;
  too_long.sequences.max_length = 1 << 20;
  test::require_error([&] { tools::run_qat_command(too_long, log); },
                      {"--max-length", "max_position_embeddings"});
  auto state_init = o;
  state_init.init = train::QuantInit::kQuantState;
  test::require_error([&] { tools::run_qat_command(state_init, log); },
                      {"--init state", "quant_state"});
  auto kd = o;
  kd.objective = tools::QatObjective::kKd;
  test::require_error([&] { tools::run_qat_command(kd, log); }, {"--teacher is required"});
  auto odd_batch = o;
  odd_batch.trainer.batch_size = 5;  // more sequences per step than the 4 documents
  test::require_error([&] { tools::run_qat_command(odd_batch, log); }, {"--batch-size"});
  CHECK_FALSE(std::filesystem::exists(o.out_dir / "model.safetensors"));
}

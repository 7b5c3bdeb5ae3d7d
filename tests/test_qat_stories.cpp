// Quantization-aware training on real trained weights: the llama2.c stories260K model, quantized to
// 2 bits (RTN, groups of 32), trained for a few hundred steps on the full-precision model's own
// samples (teacher traces), by distillation from that model (qat-kd) and by cross-entropy on the
// same samples (qat-sft). Held-out: the TinyStories text beside the model. Distillation must win
// back a clear part of the NLL the quantization lost; the table compares it with SFT.
#include "catch.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "generation/generation_engine.h"
#include "io/json_file.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tools/qat_command.h"

using namespace rqat;

namespace {

// `count` samples of the model from BOS (temperature 1, seeded), decoded, one JSONL line each.
void write_teacher_samples(const std::filesystem::path& model_dir, const std::filesystem::path& out,
                           int count, int tokens) {
  auto model = quant::load_model(model_dir);
  auto tokenizer = tokenizer::Tokenizer::load(model_dir);
  generation::GenerationRequest request;
  request.prompt_ids = {1};
  request.num_samples = count;
  request.seed = 77;
  request.params.temperature = 1.0;
  request.params.max_new_tokens = tokens;
  generation::GenerationEngine engine(*model, tokenizer, {64});
  std::ofstream file(out);
  for (const auto& sample : engine.generate({request}))
    file << io::Json({{"text", sample.text}}).dump() << "\n";
}

struct Outcome {
  double nll_before = 0, nll_after = 0, teacher_nll = 0, seconds = 0;
};

Outcome run_training(const std::filesystem::path& model_dir, const std::filesystem::path& data,
                     const std::filesystem::path& held_out, const std::filesystem::path& out,
                     tools::QatObjective objective) {
  tools::QatCommandOptions o;
  o.objective = objective;
  o.model_dir = model_dir;
  o.out_dir = out;
  if (objective == tools::QatObjective::kKd) o.teacher_dir = model_dir;
  o.spec.bits = 2;
  o.spec.group_size = 32;
  o.data.path = data;
  o.sequences.max_length = 128;
  data::TextDataOptions eval;
  eval.path = held_out;
  o.eval_data = eval;
  o.trainer.steps = 240;
  o.trainer.batch_size = 8;
  o.trainer.seed = 3;
  o.trainer.lr.peak_lr = 2e-3;
  o.trainer.lr.warmup_steps = 10;
  o.trainer.log_every = 60;
  const auto start = std::chrono::steady_clock::now();
  std::ostringstream log;
  const auto result = tools::run_qat_command(o, log);
  std::cout << log.str();
  Outcome outcome;
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(result.exit_code == 0);
  // The evaluation rows: step 0 (RTN) and the end.
  const auto evals = test::metrics_rows(out, "eval");
  REQUIRE(evals.size() == 2);
  CHECK(evals.front()["step"] == 0);
  CHECK(evals.back()["step"] == 240);
  outcome.nll_before = evals.front()["nll"].get<double>();
  outcome.nll_after = evals.back()["nll"].get<double>();
  outcome.teacher_nll = evals.front().value("teacher_nll", 0.0);
  return outcome;
}

}  // namespace

TEST_CASE("stories260K at W2: qat-kd recovers held-out NLL, compared with qat-sft",
          "[qat][stories]") {
  test::TempDir dir("qat_stories");
  const auto model_dir = test::convert_stories260k(dir);
  if (!model_dir) return;
  const auto data = test::shared_data_dir() / "tinyllama";
  write_teacher_samples(*model_dir, dir / "traces.jsonl", 256, 127);

  const auto held_out = data / "tinystories_sample.txt";
  const Outcome kd = run_training(*model_dir, dir / "traces.jsonl", held_out, dir / "kd",
                                  tools::QatObjective::kKd);
  const Outcome sft = run_training(*model_dir, dir / "traces.jsonl", held_out, dir / "sft",
                                   tools::QatObjective::kSft);

  const double fp = kd.teacher_nll, rtn = kd.nll_before;
  auto recovered = [&](double after) { return (rtn - after) / (rtn - fp); };
  std::cout << fmt::format(
      "\nstories260K held-out NLL (TinyStories sample), W2 g32, RTN init, 240 steps x 8 x 128\n");
  std::cout << fmt::format("{:<22}{:>10}{:>14}{:>10}\n", "model", "NLL", "recovered", "seconds");
  std::cout << fmt::format("{:<22}{:>10.4f}{:>14}{:>10}\n", "FP (teacher)", fp, "", "");
  std::cout << fmt::format("{:<22}{:>10.4f}{:>14}{:>10}\n", "W2 RTN", rtn, "0%", "");
  std::cout << fmt::format("{:<22}{:>10.4f}{:>13.1f}%{:>10.1f}\n", "W2 RTN + qat-sft",
                           sft.nll_after, 100 * recovered(sft.nll_after), sft.seconds);
  std::cout << fmt::format("{:<22}{:>10.4f}{:>13.1f}%{:>10.1f}\n", "W2 RTN + qat-kd", kd.nll_after,
                           100 * recovered(kd.nll_after), kd.seconds);
  CHECK(sft.nll_before == kd.nll_before);  // both start from the same RTN student
  CHECK(rtn > fp + 0.5);                   // 2 bits really hurt
  CHECK(recovered(kd.nll_after) > 0.3);    // distillation wins back a clear part of it
  // (No bound on the seconds: speed is measured by benchmarks (scripts/bench_qat), and a timed
  // check failed here under a parallel build at 133 s.)
}

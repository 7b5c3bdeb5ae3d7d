// See eval_config.h.
#include "cli/eval_config.h"

#include <chrono>
#include <filesystem>
#include <ostream>

#include "eval/regrade.h"
#include "io/error.h"
#include "tools/sample_reward.h"

namespace rqat::cli {

eval::EvalRunOptions EvalConfig::resolve() const {
  if (model.empty()) fail("--model is required (or use `eval-math grade FILE`)");
  if (out.empty()) fail("--out is required");
  if (grade_timeout_ms < 1) fail("--grade-timeout-ms must be >= 1");
  eval::EvalRunOptions o = run;
  o.model_dir = model;
  o.out_dir = out;
  o.benchmark = eval::resolve_benchmark(benchmark, !data.empty(), fields);
  o.data_path = eval::resolve_benchmark_data(data, data_dir, benchmark);
  o.prompt.use_chat_template = !no_chat_template;
  o.prompt.enable_thinking = !disable_thinking;
  o.sampling = eval::resolve_sampling(protocol, sampling);
  o.grade.timeout = std::chrono::milliseconds(grade_timeout_ms);
  if (!reward.empty()) o.reward = tools::sample_reward(reward);
  o.device = runtime.resolved_device();
  o.dtype = runtime.resolved_dtype();
  o.dequantize = runtime.dequantize;
  runtime.apply();
  o.show_progress = !quiet;
  o.tensorboard = !no_tensorboard;
  o.record = io::OptionsRecord::of(*this);
  return o;
}

void GradeConfig::run(std::ostream& log) const {
  const std::filesystem::path output =
      out.empty() ? eval::default_regrade_output(file) : std::filesystem::path(out);
  const auto summary = eval::regrade_file(file, output, {}, threads, ks);
  log << eval::format_regrade_summary(summary) << "wrote " << output.string() << "\n";
}

}  // namespace rqat::cli

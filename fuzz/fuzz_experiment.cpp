// Experiment YAML: loading, interpolation and sweep expansion into a plan (nothing runs), then the
// plan's JSON round trip that `rqat run` stores. Input: the experiment file.
#include "experiment/experiment_loader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const std::string text(fuzz::as_text(data, size));
  fuzz::expect_clean_failure([&] {
    experiment::PlanOptions options;
    options.experiment_file = "fuzz/experiment.yaml";  // a name for messages, never opened
    options.check_input_paths = false;
    const experiment::ExperimentPlan plan =
        experiment::load_experiment_plan_from_text(text, options);
    (void)experiment::plan_from_json(experiment::plan_to_json(plan));
  });
  return 0;
}

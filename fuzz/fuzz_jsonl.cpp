// JSONL inputs of eval-math: a benchmark file under every built-in spec, and a samples file that
// `eval-math grade` re-grades. Input: the JSONL text.
#include "eval/benchmark.h"
#include "eval/regrade.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const auto path = fuzz::scratch_file("test.jsonl", fuzz::as_text(data, size));
  for (const auto& spec : eval::builtin_benchmarks())
    fuzz::expect_clean_failure([&] { (void)eval::load_benchmark(path, spec); });
  fuzz::expect_clean_failure([&] {
    eval::GradeOptions options;
    options.timeout = std::chrono::milliseconds(200);
    (void)eval::regrade_file(path, fuzz::scratch_dir() / "graded.jsonl", options, /*threads=*/1);
  });
  return 0;
}

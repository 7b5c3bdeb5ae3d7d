// The grader end to end: answer extraction from a completion, normalization, parsing and
// comparison with a gold answer, both ways round. Input: "completion\0gold". grade() never throws:
// every outcome is a GradeKind, and its budget bounds the time (libFuzzer's -timeout reports a
// hang, -rss_limit_mb a blow-up).
#include "eval/grader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const auto [completion, gold] = fuzz::split_at_nul(fuzz::as_text(data, size));
  eval::GradeOptions options;
  options.timeout = std::chrono::milliseconds(200);
  (void)eval::grade(completion, gold, options);
  (void)eval::grade(gold, completion, options);
  return 0;
}

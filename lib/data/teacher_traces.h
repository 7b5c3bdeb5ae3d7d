// Teacher traces for SFT/distillation data: the samples an eval-math run wrote (samples.jsonl),
// filtered to the ones worth imitating (correct, finished, long enough, not repeated) and written
// as prompt/response JSONL that the training data loader reads directly with
// TextDataOptions{use_chat_template = true, prompt_field = "prompt", response_field = "response"}.
//
// Input fields per line: id, user (the user turn before the chat template), completion, and as the
// filters need them correct (bool), finish_reason, tokens; system and gold are carried over.
// Output line: {"id", "prompt" (= user), "response" (= completion), "system", "gold", "source"
// ("FILE:LINE" of the sample)}, in input order (files in the order given, then line order).
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace rqat::data {

struct TraceOptions {
  std::vector<std::filesystem::path> inputs;  // samples.jsonl files
  std::filesystem::path out;                  // traces.jsonl, written atomically
  bool include_incorrect = false;             // --all: keep samples whatever their grade
  std::optional<int64_t> max_per_problem;     // keep the first N traces of each problem
  int64_t min_tokens = 0;                     // drop completions of fewer generated tokens
  bool drop_truncated = true;                 // drop finish_reason "length" (cut off, unfinished)
  bool dedupe = true;                         // identical completions of a problem kept once
};

// A problem is its id and its user turn: two runs with different instructions are two prompts.
struct TraceSummary {
  int64_t files = 0;
  int64_t problems = 0;      // distinct problems read
  int64_t samples_read = 0;  // lines read
  int64_t kept = 0;
  int64_t problems_with_trace = 0;  // problems with at least one kept trace
  // Why the others were dropped (the first filter that applied, in this order).
  int64_t incorrect = 0, truncated = 0, too_short = 0, duplicates = 0, over_limit = 0;
  int64_t system_prompts = 0;      // distinct system prompts among kept traces ("" counts)
  bool any_system_prompt = false;  // some kept trace has a non-empty system prompt
};

// Reads every input, writes the kept traces to options.out and returns the counts. Errors
// (missing file, invalid JSON, missing or mistyped field) are one line "FILE:LINE: ..." naming
// the field; nothing is written then.
TraceSummary write_teacher_traces(const TraceOptions& options);

// One line: "traces: 40 samples of 20 problems from 1 file; kept 12 ... (12 problems with a
// trace); wrote OUT".
std::string format_trace_summary(const TraceSummary& summary, const TraceOptions& options);

}  // namespace rqat::data

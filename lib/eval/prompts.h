// The prompts of math-reasoning evaluation and of GRPO's rollouts, which must be the same text: the
// problem and the instruction as the user message, rendered with the model's chat template and its
// generation prompt (or as plain text), and each problem's generator seed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/artifact.h"

namespace rqat::eval {

inline constexpr const char* kDefaultInstruction =
    "Please reason step by step, and put your final answer within \\boxed{}.";

struct PromptOptions {
  bool use_chat_template = true;   // false: "{problem}\n{instruction}\n" as plain text with BOS
  std::string chat_template_file;  // placeholder template instead of the model's ("" = none)
  std::string system_prompt;       // "" = no system message (as R1's usage notes recommend)
  std::string instruction = kDefaultInstruction;  // appended to the problem; "" = none
  bool enable_thinking = true;                    // Qwen3 enable_thinking
};

// The rendered prompt text of one problem (for tests and for --dry-run style inspection).
std::string build_user_message(const std::string& problem, const PromptOptions& prompt);

// The text each problem is sampled from: the user message (problem and instruction) rendered with
// the model's chat template and its generation prompt, or "{problem}\n{instruction}\n" without the
// template; add_special_tokens says whether the tokenizer should add its own (BOS) tokens. Shared
// by eval-math and grpo's rollouts, so RL trains on exactly the prompts evaluation uses.
std::vector<std::string> render_problem_prompts(const std::vector<std::string>& problems,
                                                const PromptOptions& prompt,
                                                const io::Artifact& model,
                                                bool& add_special_tokens);
// The generator seed of every sample of a problem: a hash of (run seed, problem id), so a
// problem's samples do not change when --limit or the order of the file changes.
uint64_t problem_seed(uint64_t run_seed, const std::string& problem_id);

}  // namespace rqat::eval

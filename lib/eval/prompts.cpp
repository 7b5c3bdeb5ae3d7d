// See prompts.h.
#include "eval/prompts.h"

#include <optional>

#include "chat/chat_template.h"

namespace rqat::eval {

std::string build_user_message(const std::string& problem, const PromptOptions& prompt) {
  if (prompt.instruction.empty()) return problem;
  return problem + "\n" + prompt.instruction;
}

uint64_t problem_seed(uint64_t run_seed, const std::string& problem_id) {
  // FNV-1a over the id, then a splitmix64 finalizer mixing in the run seed: stable across
  // platforms and standard libraries (std::hash is neither).
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : problem_id) h = (h ^ c) * 0x100000001b3ULL;
  uint64_t z = h + run_seed * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<std::string> render_problem_prompts(const std::vector<std::string>& problems,
                                                const PromptOptions& prompt,
                                                const io::Artifact& model,
                                                bool& add_special_tokens) {
  std::vector<std::string> prompts;
  prompts.reserve(problems.size());
  if (!prompt.use_chat_template) {
    add_special_tokens = true;
    for (const auto& p : problems) prompts.push_back(build_user_message(p, prompt) + "\n");
    return prompts;
  }
  std::optional<std::filesystem::path> override_file;
  if (!prompt.chat_template_file.empty()) override_file = prompt.chat_template_file;
  const auto chat = chat::ChatTemplate::load(model, override_file);
  add_special_tokens = false;  // the template writes BOS itself where the family has one
  for (const auto& p : problems) {
    std::vector<chat::Message> messages;
    if (!prompt.system_prompt.empty()) messages.push_back({"system", prompt.system_prompt});
    messages.push_back({"user", build_user_message(p, prompt)});
    prompts.push_back(
        chat.render(messages, {/*add_generation_prompt=*/true, prompt.enable_thinking}));
  }
  return prompts;
}

}  // namespace rqat::eval

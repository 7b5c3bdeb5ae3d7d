// `rqat generate`'s configuration, declared once (io/options.h): samples continuations of a prompt
// (tools/generate_command.h). Its flags, help and defaults derive from this.
#pragma once

#include <iosfwd>

#include "cli/runtime_flags.h"
#include "io/options.h"
#include "tools/generate_command.h"

namespace rqat::cli {

struct GenerateConfig {
  tools::GenerateCommandOptions generate;  // every declared flag but the runtime's
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    auto& g = self.generate;
    v.value(g.model_dir, "model", "Model directory (with tokenizer files)", Role::kSetting,
            {.required = true});
    v.value(g.prompt, "prompt", "Prompt text", Role::kSetting, {.required = true});
    v.value(g.use_chat_template, "chat",
            "Wrap the prompt as a user turn in the model's chat template");
    v.value(g.system_prompt, "system", "System message (with --chat)");
    v.value(g.chat_template_file, "chat-template", "Chat template file (docs/chat_templates.md)");
    v.value(g.disable_thinking, "no-thinking",
            "Qwen3: close the thinking block up front (with --chat)");
    v.value(g.n, "num-samples", "Samples of the prompt", Role::kSetting, {.alias = "n"});
    v.value(g.max_new_tokens, "max-new-tokens", "Tokens to generate at most");
    v.value(g.temperature, "temperature", "Sampling temperature (0: greedy)");
    v.value(g.top_k, "top-k", "Keep the k most likely tokens (0: off)");
    v.value(g.top_p, "top-p", "Nucleus sampling mass (1: off)");
    v.value(g.min_p, "min-p", "Drop tokens below min_p x the top probability (0: off)");
    v.value(g.seed, "seed", "Random seed");
    v.value(g.stop_strings, "stop", "Stop string (repeatable)");
    v.value(g.ignore_eos, "ignore-eos", "Do not stop at the model's EOS tokens");
    io::section(v, "Generation engine", g.engine);
    io::section(v, "Runtime", self.runtime);
  }

  // The command's options (errors name the flag); also applies the runtime flags.
  tools::GenerateCommandOptions resolve() const;
  void run(std::ostream& out) const;
};

}  // namespace rqat::cli

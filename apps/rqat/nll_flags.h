// Flags of `rqat nll` (mean NLL and perplexity of a model on a text or JSONL file). The subcommand
// runs from its CLI11 callback, after parsing: an rqat::Error is printed as one line by run_tool
// and the exit code reaches main through CLI::RuntimeError, which CLI11_PARSE returns silently.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "data/text_dataset.h"
#include "tools/nll_command.h"

namespace rqat::cli {

inline void add_nll_subcommand(CLI::App& app) {
  struct State {
    tools::NllCommandOptions options;
    std::string data, json_out;
    int64_t max_tokens = 0, max_documents = 0;
    bool no_special_tokens = false, no_thinking = false;
    RuntimeFlags runtime;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "nll", "Mean NLL and perplexity of a model on a text or JSONL file (no generation)");
  cmd->add_option("--model", s->options.model_dir, "Model directory (with tokenizer files)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--data", s->data, "Plain text or JSONL file")
      ->required()
      ->check(CLI::ExistingFile);
  add_option_flags(*cmd, s->options.data,
                   {.rename = {{"text-field", "field"}, {"system-prompt", "system"}}});
  cmd->add_option("--chat-template", s->options.chat_template_file,
                  "Chat template file (docs/chat_templates.md)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--no-thinking", s->no_thinking,
                "Qwen3: generation prompt with an empty thinking block (--chat)");
  cmd->add_flag("--no-special-tokens", s->no_special_tokens,
                "Do not add the tokenizer's special tokens (e.g. BOS) to text documents");
  cmd->add_option("--seq-len", s->options.seq_len, "Tokens per scoring window")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-tokens", s->max_tokens, "Score at most this many tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-documents", s->max_documents, "Read at most this many documents (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch-size", s->options.batch_size, "Windows scored together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--json", s->json_out, "Also write the numbers to this JSON file");
  add_runtime_flags(*cmd, s->runtime);

  cmd->callback([s] {
    const int code = run_tool("rqat", [&] {
      auto& o = s->options;
      o.data.path = s->data;
      o.data.add_special_tokens = !s->no_special_tokens;
      o.data.enable_thinking = !s->no_thinking;
      if (!o.chat_template_file.empty() || !o.data.system_prompt.empty() || s->no_thinking)
        o.data.use_chat_template = true;  // any chat option implies the chat template
      if (s->max_tokens > 0) o.max_tokens = s->max_tokens;
      if (s->max_documents > 0) o.data.max_documents = static_cast<size_t>(s->max_documents);
      if (!s->json_out.empty()) o.json_out = s->json_out;
      s->runtime.apply();
      o.dtype = s->runtime.resolved_dtype();
      o.dequantize = s->runtime.dequantize;
      o.device = s->runtime.resolved_device();
      tools::run_nll_command(o, std::cout);
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli

// `rqat nll`'s configuration, declared once (io/options.h): mean NLL and perplexity of a model on a
// text or JSONL file (tools/nll_command.h). The file's options are data::TextDataOptions' own, with
// the spellings rqat nll had before they were declared (--field, --system).
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>

#include "cli/runtime_flags.h"
#include "io/options.h"
#include "tools/nll_command.h"

namespace rqat::cli {

struct NllConfig {
  tools::NllCommandOptions nll;  // model, the file's options, chat template, window and batch
  std::filesystem::path data;
  bool no_thinking = false, no_special_tokens = false;
  int64_t max_tokens = 0, max_documents = 0;  // 0: all
  std::string json;
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.nll.model_dir, "model", "Model directory (with tokenizer files)", Role::kSetting,
            {.required = true});
    v.value(self.data, "data", "Plain text or JSONL file", Role::kSetting, {.required = true});
    io::section(v, "", self.nll.data,
                {.rename = {{"text-field", "field"}, {"system-prompt", "system"}}});
    v.value(self.nll.chat_template_file, "chat-template",
            "Chat template file (docs/chat_templates.md)");
    v.value(self.no_thinking, "no-thinking",
            "Qwen3: generation prompt with an empty thinking block (--chat)");
    v.value(self.no_special_tokens, "no-special-tokens",
            "Do not add the tokenizer's special tokens (e.g. BOS) to text documents");
    v.value(self.nll.seq_len, "seq-len", "Tokens per scoring window");
    v.value(self.max_tokens, "max-tokens", "Score at most this many tokens (0: all)");
    v.value(self.max_documents, "max-documents", "Read at most this many documents (0: all)");
    v.value(self.nll.batch_size, "batch-size", "Windows scored together", Role::kRunControl);
    v.value(self.json, "json", "Also write the numbers to this JSON file", Role::kRunControl);
    io::section(v, "Runtime", self.runtime);
  }

  // The command's options (errors name the flag); also applies the runtime flags.
  tools::NllCommandOptions resolve() const;
  void run(std::ostream& out) const;
};

}  // namespace rqat::cli

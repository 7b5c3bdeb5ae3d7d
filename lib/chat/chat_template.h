// Chat formatting of conversations for the model families rqat serves. The format is recognized
// from the Jinja chat_template a checkpoint ships (tokenizer_config.json or chat_template.jinja)
// and rendered by C++ code written for that format, so no Jinja engine is needed; a user may
// instead give a template file in a small placeholder syntax (docs/chat_templates.md).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/artifact.h"
#include "io/enum_names.h"

namespace rqat::chat {

struct Message {
  std::string role;  // system | user | assistant
  std::string content;
};

struct RenderOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;  // Qwen3: false closes an empty <think></think> block up front
};

enum class Format {
  kChatML,      // Qwen2 / Qwen2.5 (optionally with a default system prompt)
  kQwen3,       // ChatML with <think> handling and enable_thinking
  kDeepSeekR1,  // <｜User｜>/<｜Assistant｜>, generation prompt may open <think>
  kLlama3,      // <|start_header_id|>role<|end_header_id|> ... <|eot_id|> (3.0)
  kLlama31,     // 3.1+: system header with knowledge cut-off and date lines
  kCustom,      // placeholder template file
  kCount,       // not a format
};
constexpr EnumNames<Format> enum_names(Format) {
  return {"chatml", "qwen3", "deepseek-r1", "llama3", "llama3.1", "custom"};
}

// Placeholder template (kCustom). Each field is a text with {content}, {bos_token} and {eos_token}.
struct CustomTemplate {
  std::string prefix;  // once at the start, e.g. "{bos_token}"
  std::string system, user, assistant;
  std::string generation_prompt;              // appended when add_generation_prompt
  std::optional<std::string> default_system;  // used when the conversation has no system message
};

class ChatTemplate {
 public:
  // Recognizes the format of a Jinja chat template held in memory (any text: the work is a few
  // linear scans); an unrecognized template is an error that names `source` and chat_template and
  // says how to give a template file instead.
  static ChatTemplate recognize(const std::string& jinja, const std::string& bos_token,
                                const std::string& eos_token, const std::string& source);
  // Reads chat_template.jinja or tokenizer_config.json's chat_template (and bos/eos tokens) from a
  // model or tokenizer directory's artifact (the path version opens it); `override_file`
  // (placeholder syntax) wins when given.
  static ChatTemplate load(
      const io::Artifact& artifact,
      const std::optional<std::filesystem::path>& override_file = std::nullopt);
  static ChatTemplate load(
      const std::filesystem::path& dir,
      const std::optional<std::filesystem::path>& override_file = std::nullopt);
  static ChatTemplate from_file(const std::filesystem::path& path,
                                const std::string& bos_token = "",
                                const std::string& eos_token = "");
  // from_file's parser on a placeholder template held in memory; `where` names it in errors.
  static ChatTemplate from_placeholder_text(const std::string& yaml, const std::string& where,
                                            const std::string& bos_token = "",
                                            const std::string& eos_token = "");

  std::string render(const std::vector<Message>& messages, const RenderOptions& options = {}) const;
  Format format() const { return format_; }
  const char* format_name() const;

 private:
  Format format_ = Format::kChatML;
  std::string bos_token_, eos_token_;
  std::optional<std::string> default_system_;  // ChatML's built-in system prompt
  bool think_in_generation_prompt_ = false;    // DeepSeek-R1: generation prompt opens <think>\n
  std::string date_string_ = "26 Jul 2024";    // Llama 3.1 default when no date is given
  CustomTemplate custom_;
};

}  // namespace rqat::chat

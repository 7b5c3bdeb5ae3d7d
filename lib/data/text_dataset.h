// Token data read from text files, shared by calibration (ptq), `rqat nll` and the QAT trainers.
//
// Sources:
//   - plain text: one document per paragraph (blank-line separated, the default), the whole file
//     as one document, or documents ended by a separator line such as "<|endoftext|>" (the
//     TinyStories layout);
//   - JSONL: one document per object line, either a text field (default "text") or a
//     prompt/response pair rendered with the model's chat template.
//
// Each document becomes token ids plus a per-token loss mask: mask[t] says whether token t is a
// prediction target (the loss of predicting token t from tokens < t counts). Plain text and JSONL
// text documents are all targets; a chat document's mask is true exactly on the response tokens.
//
// Chat rendering: the prompt is rendered as the user turn followed by the generation prompt, the
// exact text the model sees at inference; the response is the text the model generates after it
// (so traces saved by generation are used verbatim), followed by the template's end of the
// assistant turn (e.g. "<|im_end|>\n"), which is a target too: the model must learn to stop.
// Prompt and response+end are tokenized separately, as generation produces them, so the mask
// boundary is always a token boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "io/enum_names.h"
#include "tokenizer/tokenizer.h"

namespace rqat::data {

enum class DataFormat {
  kAuto,       // by extension: .jsonl / .json -> JSONL, anything else -> plain text
  kPlainText,  // see PlainTextSplit
  kJsonl,
  kCount,  // not a format
};
constexpr EnumNames<DataFormat> enum_names(DataFormat) { return {"auto", "text", "jsonl"}; }

enum class PlainTextSplit {
  kParagraphs,     // documents separated by one or more blank (whitespace-only) lines
  kWholeFile,      // the whole file is one document
  kSeparatorLine,  // a line equal to `separator_line` (surrounding whitespace ignored) ends one
  kCount,          // not a split
};
constexpr EnumNames<PlainTextSplit> enum_names(PlainTextSplit) {
  return {"paragraphs", "whole-file", "separator"};
}

struct TextDataOptions {
  std::filesystem::path path;
  DataFormat format = DataFormat::kAuto;
  PlainTextSplit split = PlainTextSplit::kParagraphs;
  std::string separator_line = "<|endoftext|>";
  std::string text_field = "text";      // JSONL without the chat template
  bool use_chat_template = false;       // JSONL: prompt_field as the user turn, response_field as
  std::string prompt_field = "prompt";  // the assistant turn, loss on the response only
  std::string response_field = "response";  //
  std::string system_prompt;                // system message of chat documents ("" = none)
  bool enable_thinking = true;              // Qwen3 generation prompt (false: empty think block)
  // Plain and JSONL text: the tokenizer's own special tokens (e.g. Llama's BOS) are added to each
  // document, as transformers' tokenizer(text) does. Chat documents never add them: the template
  // writes BOS itself where the family has one.
  bool add_special_tokens = true;
  bool append_eos = false;  // end every document with the tokenizer's eos_token (packing)
  std::optional<size_t> max_documents;  // stop after this many documents (file order)

  // The options a user picks per file (io/options.h): each tool offers them under its prefix
  // (--calib-*, --data-*), the path being the tool's own flag.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.format, "format", "auto (.jsonl/.json: JSONL), text or jsonl");
    v.value(self.split, "split",
            "Plain text documents: paragraphs (blank-line separated), whole-file, or separator "
            "(lines equal to the separator)");
    v.value(self.separator_line, "separator", "Document separator line (split separator)");
    v.value(self.text_field, "text-field", "JSONL text field");
    v.value(self.use_chat_template, "chat",
            "JSONL prompt/response pairs rendered with the model's chat template; only response "
            "tokens are targets");
    v.value(self.prompt_field, "prompt-field", "JSONL prompt field (chat)");
    v.value(self.response_field, "response-field", "JSONL response field (chat)");
    v.value(self.system_prompt, "system-prompt", "System message of chat documents");
  }
};

struct TokenizedDocument {
  std::vector<tokenizer::TokenId> tokens;
  std::vector<uint8_t> loss_mask;  // same length as tokens; 1 = a prediction target
  size_t index = 0;                // 0-based position among the file's documents
  size_t line = 0;                 // 1-based line of the file where the document starts
};

struct TokenizedDataset {
  std::filesystem::path source;
  DataFormat format = DataFormat::kPlainText;  // resolved, never kAuto
  std::string chat_format;                     // chat template format name, "" without chat
  std::vector<TokenizedDocument> documents;    // file order; empty documents kept (no tokens)
  int64_t total_tokens = 0;
  int64_t target_tokens = 0;  // tokens whose mask is 1
};

// The resolved format of `options` (kAuto decided by the file extension).
DataFormat resolve_format(const TextDataOptions& options);

// Reads and tokenizes every document. `chat` is required when options.use_chat_template. Errors
// (missing file, invalid JSON, missing or non-string field, NUL bytes in a text file) are one
// line "FILE:LINE: ..." naming the field.
TokenizedDataset load_tokenized_dataset(const TextDataOptions& options,
                                        const tokenizer::Tokenizer& tokenizer,
                                        const chat::ChatTemplate* chat = nullptr);

// One chat document: the rendered prompt (user turn + generation prompt) and the response text
// that follows it (response + end of the assistant turn). Exposed for tests and for data tools
// that write rendered traces.
struct ChatDocumentText {
  std::string prompt;
  std::string response;
};
ChatDocumentText render_chat_document(const chat::ChatTemplate& chat, const std::string& system,
                                      const std::string& prompt, const std::string& response,
                                      bool enable_thinking);

}  // namespace rqat::data

// See text_dataset.h.
#include "data/text_dataset.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/error.h"
#include "io/jsonl.h"

namespace rqat::data {

namespace {

// Thrown to leave for_each_jsonl_object early once max_documents are read.
struct EnoughDocuments {};

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\f\v");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\f\v") + 1 - begin);
}

std::string read_text_file(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) fail("{}: file not found", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  // A NUL byte means a binary or corrupt file: tokenizing it would silently produce garbage.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    const size_t line = 1 + std::count(text.begin(), text.begin() + nul, '\n');
    fail("{}:{}: NUL byte on line {}: not a text file", path.string(), line, line);
  }
  return text;
}

struct RawDocument {
  std::string text;      // plain or JSONL text
  std::string prompt;    // chat
  std::string response;  // chat
  size_t line = 0;
};

// Plain text documents in file order, per the split mode; whitespace-only documents are dropped.
template <class Visit>
void for_each_plain_document(const TextDataOptions& options, Visit&& visit) {
  const std::string text = read_text_file(options.path);
  if (options.split == PlainTextSplit::kWholeFile) {
    if (!is_blank(text)) visit(RawDocument{text, "", "", 1});
    return;
  }
  const std::string separator = trim(options.separator_line);
  if (options.split == PlainTextSplit::kSeparatorLine && separator.empty())
    fail("{}: the document separator line is empty", options.path.string());
  // Leading and trailing blank lines of a document are not part of it.
  std::string current;
  size_t start_line = 0, line_number = 0, content_size = 0;
  auto flush = [&] {
    if (start_line != 0) visit(RawDocument{current.substr(0, content_size), "", "", start_line});
    current.clear();
    start_line = content_size = 0;
  };
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool ends_document =
        options.split == PlainTextSplit::kParagraphs ? is_blank(line) : trim(line) == separator;
    if (ends_document) {
      flush();
      continue;
    }
    if (start_line == 0) {
      if (is_blank(line)) continue;
      start_line = line_number;
    } else {
      current += '\n';
    }
    current += line;
    if (!is_blank(line)) content_size = current.size();
  }
  flush();
}

std::string string_field(const nlohmann::json& row, const std::string& field,
                         const std::string& file, size_t line) {
  auto it = row.find(field);
  if (it == row.end()) {
    std::string keys;
    for (const auto& [key, value] : row.items()) keys += (keys.empty() ? "" : ", ") + key;
    fail("{}:{}: field '{}' missing on line {} (fields: {})", file, line, field, line,
         keys.empty() ? "none" : keys);
  }
  if (!it->is_string())
    fail("{}:{}: field '{}' on line {} is a {}, not a string", file, line, field, line,
         it->type_name());
  return it->get<std::string>();
}

template <class Visit>
void for_each_jsonl_document(const TextDataOptions& options, Visit&& visit) {
  const std::string file = options.path.string();
  io::for_each_jsonl_object<nlohmann::json>(
      options.path, [&](const nlohmann::json& row, size_t line) {
        RawDocument doc;
        doc.line = line;
        if (options.use_chat_template) {
          doc.prompt = string_field(row, options.prompt_field, file, line);
          doc.response = string_field(row, options.response_field, file, line);
        } else {
          doc.text = string_field(row, options.text_field, file, line);
        }
        visit(std::move(doc));
      });
}

void append(std::vector<tokenizer::TokenId>& tokens, std::vector<uint8_t>& mask,
            const std::vector<tokenizer::TokenId>& more, bool target) {
  tokens.insert(tokens.end(), more.begin(), more.end());
  mask.insert(mask.end(), more.size(), target ? 1 : 0);
}

}  // namespace

DataFormat resolve_format(const TextDataOptions& options) {
  if (options.format != DataFormat::kAuto) return options.format;
  const std::string ext = options.path.extension().string();
  return ext == ".jsonl" || ext == ".json" ? DataFormat::kJsonl : DataFormat::kPlainText;
}

ChatDocumentText render_chat_document(const chat::ChatTemplate& chat, const std::string& system,
                                      const std::string& prompt, const std::string& response,
                                      bool enable_thinking) {
  std::vector<chat::Message> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", prompt});
  ChatDocumentText out;
  out.prompt = chat.render(messages, {/*add_generation_prompt=*/true, enable_thinking});
  // The end of an assistant turn is whatever the template writes after the assistant content:
  // render a completed turn around a marker and keep the text after it.
  static const std::string kMarker = "\x1e\x1frqat-response-marker\x1f\x1e";
  messages.push_back({"assistant", kMarker});
  const std::string full = chat.render(messages, {/*add_generation_prompt=*/false, true});
  const size_t at = full.rfind(kMarker);
  if (at == std::string::npos)
    fail("chat template ({}) drops the assistant content; it cannot render training documents",
         chat.format_name());
  out.response = response + full.substr(at + kMarker.size());
  return out;
}

TokenizedDataset load_tokenized_dataset(const TextDataOptions& options,
                                        const tokenizer::Tokenizer& tokenizer,
                                        const chat::ChatTemplate* chat) {
  TokenizedDataset data;
  data.source = options.path;
  data.format = resolve_format(options);
  if (options.use_chat_template) {
    if (data.format != DataFormat::kJsonl)
      fail("{}: the chat template needs JSONL prompt/response records, not plain text",
           options.path.string());
    if (chat == nullptr)
      fail("{}: the chat template was asked for but not given", options.path.string());
    data.chat_format = chat->format_name();
  }
  std::optional<tokenizer::TokenId> eos;
  if (options.append_eos) {
    const auto& eos_token = tokenizer.config().eos_token;
    if (eos_token) eos = tokenizer.token_to_id(*eos_token);
    if (!eos)
      fail("{}: append_eos needs the tokenizer's eos_token, which it lacks", options.path.string());
  }

  auto add_document = [&](RawDocument raw) {
    if (options.max_documents && data.documents.size() >= *options.max_documents)
      throw EnoughDocuments{};
    TokenizedDocument doc;
    doc.index = data.documents.size();
    doc.line = raw.line;
    if (options.use_chat_template) {
      const auto text = render_chat_document(*chat, options.system_prompt, raw.prompt, raw.response,
                                             options.enable_thinking);
      append(doc.tokens, doc.loss_mask, tokenizer.encode(text.prompt, false), false);
      append(doc.tokens, doc.loss_mask, tokenizer.encode(text.response, false), true);
    } else {
      append(doc.tokens, doc.loss_mask, tokenizer.encode(raw.text, options.add_special_tokens),
             true);
    }
    if (eos) append(doc.tokens, doc.loss_mask, {*eos}, true);
    data.total_tokens += static_cast<int64_t>(doc.tokens.size());
    for (const uint8_t m : doc.loss_mask) data.target_tokens += m;
    data.documents.push_back(std::move(doc));
  };
  try {
    if (data.format == DataFormat::kJsonl) {
      for_each_jsonl_document(options, add_document);
    } else {
      for_each_plain_document(options, add_document);
    }
  } catch (const EnoughDocuments&) {
  }
  return data;
}

}  // namespace rqat::data

// See chat_template.h. Each render_* function reproduces, for system/user/assistant conversations,
// exactly the text its family's Jinja template produces (checked against transformers'
// apply_chat_template in tests/python/make_chat_fixtures.py). Tool calls are out of scope.
#include "chat/chat_template.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>

#include "io/error.h"
#include "io/json_file.h"

namespace rqat::chat {

namespace {

std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) begin = s.find_first_not_of(chars);
  if (begin == std::string_view::npos) return "";
  if (right) end = s.find_last_not_of(chars) + 1;
  return std::string(s.substr(begin, end - begin));
}

// Jinja's trim and Python's str.strip() with no argument: ASCII whitespace on both ends.
std::string trim(std::string_view s) { return strip_chars(s, " \t\n\r\f\v", true, true); }

// Python's s.split(sep)[0] and s.split(sep)[-1].
std::string before_first(const std::string& s, const std::string& sep) {
  return s.substr(0, s.find(sep));
}
std::string after_last(const std::string& s, const std::string& sep) {
  const size_t at = s.rfind(sep);
  return at == std::string::npos ? s : s.substr(at + sep.size());
}

// The body of a single-quoted Jinja string literal: \n, \t, \\ and \' unescaped.
std::string unescape_jinja(const std::string& literal) {
  std::string out;
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size()) {
      const char next = literal[++i];
      out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
    } else {
      out += literal[i];
    }
  }
  return out;
}

// The templates are text of any size from a stranger, so they are read by plain scans that do a
// bounded amount of work per byte. (std::regex recursed once per character and overflowed the
// stack on templates of 10^5 characters.)

bool is_regex_space(char c) {  // \s of the ECMAScript regexes these scans replace
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size() && is_regex_space(s[i])) ++i;
  return i;
}

// The default of Llama 3.1's date: the first `date_string = "..."` (a non-empty literal, spaces
// allowed around '=') in the template.
std::optional<std::string> default_date(std::string_view jinja) {
  constexpr std::string_view kName = "date_string";
  for (size_t at = jinja.find(kName); at != std::string_view::npos;
       at = jinja.find(kName, at + 1)) {
    size_t i = skip_spaces(jinja, at + kName.size());
    if (i >= jinja.size() || jinja[i] != '=') continue;
    i = skip_spaces(jinja, i + 1);
    if (i >= jinja.size() || jinja[i] != '"') continue;
    const size_t close = jinja.find('"', i + 1);
    if (close == std::string_view::npos) return std::nullopt;  // no later literal can close either
    if (close > i + 1) return std::string(jinja.substr(i + 1, close - i - 1));
  }
  return std::nullopt;
}

// Where the body of a single-quoted Jinja literal stops, scanning from `i` by characters and
// escape pairs: at its closing quote, or at a backslash before a line break or the end, which
// ends the literal as far as these templates go. `on_boundary(i)` sees every position between
// characters or pairs along the way.
template <class OnBoundary>
size_t scan_quoted_body(std::string_view s, size_t i, OnBoundary on_boundary) {
  while (i < s.size()) {
    on_boundary(i);
    if (s[i] == '\'') return i;
    if (s[i] != '\\') {
      ++i;
    } else if (i + 1 < s.size() && s[i + 1] != '\n' && s[i + 1] != '\r') {
      i += 2;
    } else {
      return i;
    }
  }
  return i;
}

// ChatML's built-in system prompt: the literal '<|im_start|>system\n...<|im_end|>\n' (escapes as
// written in the template), its body unescaped. Linear: a literal scanned without success is not
// scanned again from a later occurrence inside it, which would find the same boundaries and stop
// at the same place.
std::optional<std::string> default_system_prompt(std::string_view jinja) {
  constexpr std::string_view kOpen = "'<|im_start|>system\\n";
  constexpr std::string_view kClose = "<|im_end|>\\n'";
  size_t from = 0;
  for (size_t at = jinja.find(kOpen, from); at != std::string_view::npos;
       at = jinja.find(kOpen, from)) {
    const size_t body = at + kOpen.size();
    std::optional<size_t> body_end;  // the last boundary followed by the closing text
    const size_t stop = scan_quoted_body(jinja, body, [&](size_t i) {
      if (jinja.substr(i).starts_with(kClose)) body_end = i;
    });
    if (body_end) return unescape_jinja(std::string(jinja.substr(body, *body_end - body)));
    from = std::max(stop, at + 1);
  }
  return std::nullopt;
}

void check_roles(const std::vector<Message>& messages) {
  for (const auto& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      fail("chat template: role '{}' is not supported (system, user, assistant)", m.role);
    }
  }
}

std::string render_chatml(const std::vector<Message>& messages,
                          const std::optional<std::string>& default_system,
                          const RenderOptions& options) {
  std::string out;
  const bool leading_system = !messages.empty() && messages[0].role == "system";
  if (leading_system) {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  } else if (default_system) {
    out += "<|im_start|>system\n" + *default_system + "<|im_end|>\n";
  }
  for (size_t i = leading_system ? 1 : 0; i < messages.size(); ++i) {
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_qwen3(const std::vector<Message>& messages, const RenderOptions& options) {
  std::string out;
  const bool leading_system = !messages.empty() && messages[0].role == "system";
  if (leading_system) out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  // Reasoning is kept only for assistant turns after the last user query.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user") {
      last_query = i;
      break;
    }
  }
  for (size_t i = leading_system ? 1 : 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role != "assistant") {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      continue;
    }
    std::string content = m.content, reasoning;
    if (content.find("</think>") != std::string::npos) {
      reasoning = strip_chars(
          after_last(strip_chars(before_first(content, "</think>"), "\n", false, true), "<think>"),
          "\n", true, false);
      content = strip_chars(after_last(content, "</think>"), "\n", true, false);
    }
    const bool last = i + 1 == messages.size();
    if (i > last_query && (last || !reasoning.empty())) {
      out += "<|im_start|>assistant\n<think>\n" + strip_chars(reasoning, "\n", true, true) +
             "\n</think>\n\n" + strip_chars(content, "\n", true, false);
    } else {
      out += "<|im_start|>assistant\n" + content;
    }
    out += "<|im_end|>\n";
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string render_deepseek_r1(const std::vector<Message>& messages, const std::string& bos,
                               bool think_in_generation_prompt, const RenderOptions& options) {
  std::string system;
  bool first_system = true;
  for (const auto& m : messages) {
    if (m.role != "system") continue;
    system += (first_system ? "" : "\n\n") + m.content;
    first_system = false;
  }
  std::string out = bos + system;
  for (const auto& m : messages) {
    if (m.role == "user") out += "<｜User｜>" + m.content;
    if (m.role == "assistant") {
      // Earlier turns are shown without their reasoning.
      const std::string content = m.content.find("</think>") != std::string::npos
                                      ? after_last(m.content, "</think>")
                                      : m.content;
      out += "<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>";
    }
  }
  if (options.add_generation_prompt)
    out += think_in_generation_prompt ? "<｜Assistant｜><think>\n" : "<｜Assistant｜>";
  return out;
}

std::string llama_turn(const std::string& role, const std::string& content) {
  return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>";
}

std::string render_llama3(const std::vector<Message>& messages, const std::string& bos,
                          const RenderOptions& options) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i)
    out += (i == 0 ? bos : "") + llama_turn(messages[i].role, messages[i].content);
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_llama31(const std::vector<Message>& messages, const std::string& bos,
                           const std::string& date, const RenderOptions& options) {
  const bool leading_system = !messages.empty() && messages[0].role == "system";
  std::string out = bos + "<|start_header_id|>system<|end_header_id|>\n\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n";
  out += (leading_system ? trim(messages[0].content) : "") + "<|eot_id|>";
  for (size_t i = leading_system ? 1 : 0; i < messages.size(); ++i)
    out += llama_turn(messages[i].role, messages[i].content);
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string fill(const std::string& pattern, const std::string& content, const std::string& bos,
                 const std::string& eos) {
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 9, "{content}") == 0) {
      out += content;
      i += 9;
    } else if (pattern.compare(i, 11, "{bos_token}") == 0) {
      out += bos;
      i += 11;
    } else if (pattern.compare(i, 11, "{eos_token}") == 0) {
      out += eos;
      i += 11;
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

std::string render_custom(const std::vector<Message>& messages, const CustomTemplate& t,
                          const std::string& bos, const std::string& eos,
                          const RenderOptions& options) {
  std::string out = fill(t.prefix, "", bos, eos);
  if (t.default_system && (messages.empty() || messages[0].role != "system")) {
    out += fill(t.system, *t.default_system, bos, eos);
  }
  for (const auto& m : messages) {
    const std::string& pattern = m.role == "system" ? t.system
                                 : m.role == "user" ? t.user
                                                    : t.assistant;
    out += fill(pattern, m.content, bos, eos);
  }
  if (options.add_generation_prompt) out += fill(t.generation_prompt, "", bos, eos);
  return out;
}

// tokenizer_config.json holds special tokens as strings or as {"content": ...} objects.
std::string token_string(const io::Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

// What a placeholder template file sets (docs/chat_templates.md); bos/eos tokens when it names
// them.
struct PlaceholderFields {
  CustomTemplate custom;
  std::optional<std::string> bos_token, eos_token;
};

PlaceholderFields read_placeholder_fields(const YAML::Node& root, const std::string& where) {
  if (!root.IsMap())
    fail("{}: a chat template file is a YAML mapping (see docs/chat_templates.md)", where);
  PlaceholderFields f;
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    if (!item.second.IsScalar())
      fail("{}: line {}: '{}' must be a string", where, item.second.Mark().line + 1, key);
    const std::string value = item.second.as<std::string>();
    if (key == "prefix")
      f.custom.prefix = value;
    else if (key == "system")
      f.custom.system = value;
    else if (key == "user")
      f.custom.user = value;
    else if (key == "assistant")
      f.custom.assistant = value;
    else if (key == "generation_prompt")
      f.custom.generation_prompt = value;
    else if (key == "default_system")
      f.custom.default_system = value;
    else if (key == "bos_token")
      f.bos_token = value;
    else if (key == "eos_token")
      f.eos_token = value;
    else
      fail(
          "{}: line {}: unknown key '{}' (prefix, system, user, assistant, generation_prompt, "
          "default_system, bos_token, eos_token)",
          where, item.first.Mark().line + 1, key);
  }
  for (const auto* field : {&f.custom.user, &f.custom.assistant}) {
    if (field->find("{content}") == std::string::npos) {
      fail("{}: 'user' and 'assistant' must contain {{content}}", where);
    }
  }
  if (f.custom.system.empty()) f.custom.system = f.custom.user;
  return f;
}

}  // namespace

ChatTemplate ChatTemplate::recognize(const std::string& jinja, const std::string& bos_token,
                                     const std::string& eos_token, const std::string& source) {
  ChatTemplate t;
  t.bos_token_ = bos_token;
  t.eos_token_ = eos_token;
  auto has = [&](const char* needle) { return jinja.find(needle) != std::string::npos; };
  if (has("<｜Assistant｜>") && has("<｜User｜>")) {
    t.format_ = Format::kDeepSeekR1;
    t.think_in_generation_prompt_ = has("<｜Assistant｜><think>\\n");
  } else if (has("<|start_header_id|>") && has("<|eot_id|>")) {
    t.format_ = has("Cutting Knowledge Date") ? Format::kLlama31 : Format::kLlama3;
    if (auto date = default_date(jinja)) t.date_string_ = std::move(*date);
  } else if (has("<|im_start|>") && (has("enable_thinking") || has("reasoning_content"))) {
    t.format_ = Format::kQwen3;
  } else if (has("<|im_start|>") && has("<|im_end|>")) {
    t.format_ = Format::kChatML;
    t.default_system_ = default_system_prompt(jinja);
  } else {
    fail(
        "{}: chat_template is not a recognized format (ChatML/Qwen2.5, Qwen3, DeepSeek-R1, "
        "Llama-3); "
        "give one with --chat-template FILE (syntax in docs/chat_templates.md)",
        source);
  }
  return t;
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& dir,
                                const std::optional<std::filesystem::path>& override_file) {
  return load(io::Artifact::open_any(dir), override_file);
}

ChatTemplate ChatTemplate::load(const io::Artifact& artifact,
                                const std::optional<std::filesystem::path>& override_file) {
  const io::Json config =
      artifact.has(io::kTokenizerConfigFile) ? artifact.tokenizer_config : io::Json::object();
  const std::string config_file = artifact.where(io::kTokenizerConfigFile);
  const std::string bos = token_string(config, "bos_token"),
                    eos = token_string(config, "eos_token");
  if (override_file) return from_file(*override_file, bos, eos);

  if (artifact.chat_template)
    return recognize(*artifact.chat_template, bos, eos, artifact.where(io::kChatTemplateFile));
  auto it = config.find("chat_template");
  if (it != config.end() && it->is_string())
    return recognize(it->get<std::string>(), bos, eos, config_file);
  if (it != config.end() && it->is_array()) {  // named templates: use "default"
    for (const auto& named : *it) {
      // Checked field by field: json::value() throws its own exception on a non-string name.
      if (!named.is_object()) continue;
      const auto name = named.find("name"), text = named.find("template");
      if (name != named.end() && name->is_string() && *name == "default" && text != named.end() &&
          text->is_string()) {
        return recognize(text->get<std::string>(), bos, eos, config_file);
      }
    }
  }
  fail(
      "{}: no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json); "
      "give one with --chat-template FILE (syntax in docs/chat_templates.md)",
      artifact.dir.string());
}

ChatTemplate ChatTemplate::from_file(const std::filesystem::path& path,
                                     const std::string& bos_token, const std::string& eos_token) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open chat template file", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return from_placeholder_text(text.str(), path.string(), bos_token, eos_token);
}

ChatTemplate ChatTemplate::from_placeholder_text(const std::string& yaml, const std::string& where,
                                                 const std::string& bos_token,
                                                 const std::string& eos_token) {
  PlaceholderFields fields;
  // yaml-cpp throws its own exceptions from parsing and from conversions (a key that is itself
  // a list or a map): all of them become one line naming the file.
  try {
    fields = read_placeholder_fields(YAML::Load(yaml), where);
  } catch (const YAML::Exception& e) {
    fail("{}: line {}: {}", where, e.mark.line + 1, e.msg);
  }
  ChatTemplate t;
  t.format_ = Format::kCustom;
  t.bos_token_ = fields.bos_token.value_or(bos_token);
  t.eos_token_ = fields.eos_token.value_or(eos_token);
  t.custom_ = std::move(fields.custom);
  return t;
}

std::string ChatTemplate::render(const std::vector<Message>& messages,
                                 const RenderOptions& options) const {
  check_roles(messages);
  switch (format_) {
    case Format::kChatML:
      return render_chatml(messages, default_system_, options);
    case Format::kQwen3:
      return render_qwen3(messages, options);
    case Format::kDeepSeekR1:
      return render_deepseek_r1(messages, bos_token_, think_in_generation_prompt_, options);
    case Format::kLlama3:
      return render_llama3(messages, bos_token_, options);
    case Format::kLlama31:
      return render_llama31(messages, bos_token_, date_string_, options);
    case Format::kCustom:
      return render_custom(messages, custom_, bos_token_, eos_token_, options);
    case Format::kCount:  // not a format
      break;
  }
  return "";
}

const char* ChatTemplate::format_name() const { return enum_name(format_).data(); }

}  // namespace rqat::chat

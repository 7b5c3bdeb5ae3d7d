// See tokenizer_config.h.
#include "tokenizer/tokenizer_config.h"

#include "tokenizer/json_fields.h"

namespace rqat::tokenizer {
namespace {

using json_fields::Json;

// A special token given as a string, null, or an AddedToken object {"content": ...}.
std::optional<std::string> token_value(const Json& value, const std::string& file,
                                       const std::string& field) {
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) return json_fields::string(value, "content", file, field);
  json_fields::bad(file, field, "expected a string, null or an object with \"content\"");
}

struct Defaults {
  std::optional<std::string> bos, eos, unk, pad;
};

// The constructor defaults of transformers' tokenizer classes for keys the config leaves out.
Defaults class_defaults(const std::string& tokenizer_class) {
  const std::string eot = "<|endoftext|>";
  if (tokenizer_class.starts_with("Qwen2Tokenizer")) return {std::nullopt, eot, eot, eot};
  if (tokenizer_class.empty() || tokenizer_class.starts_with("GPT2Tokenizer"))
    return {eot, eot, eot, std::nullopt};
  return {};
}

void read_special(const Json& j, const std::string& file, TokenizerConfigFiles& out,
                  bool only_missing) {
  struct Slot {
    const char* key;
    std::optional<std::string>* value;
  };
  TokenizerConfig& c = out.config;
  for (const Slot slot : {Slot{"bos_token", &c.bos_token}, Slot{"eos_token", &c.eos_token},
                          Slot{"unk_token", &c.unk_token}, Slot{"pad_token", &c.pad_token}}) {
    if (!j.contains(slot.key) || (only_missing && slot.value->has_value())) continue;
    *slot.value = token_value(j[slot.key], file, slot.key);
  }
}

// An added_tokens_decoder key: a token id in decimal digits ("12"), nothing else (no sign, space or
// leading zero), below 2^31.
std::optional<TokenId> id_key(std::string_view key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  int64_t id = 0;
  for (const char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  if (id > INT32_MAX) return std::nullopt;
  return static_cast<TokenId>(id);
}

Json parse_config(std::string_view text, const std::string& file) {
  if (text.empty()) return Json::object();
  Json j = json_fields::parse(text, file);
  if (!j.is_object()) json_fields::bad(file, "(root)", "expected an object");
  return j;
}

void read_chat_template(const Json& j, const std::string& file, TokenizerConfigFiles& out) {
  const Json* t = json_fields::optional_member(j, "chat_template");
  if (t == nullptr) return;
  if (t->is_string()) {
    out.config.chat_template = t->get<std::string>();
  } else if (t->is_array()) {
    // Several named templates: the one called "default", else the first.
    for (size_t i = 0; i < t->size(); ++i) {
      const std::string field = "chat_template[" + std::to_string(i) + "]";
      const std::string name = json_fields::string((*t)[i], "name", file, field);
      if (out.config.chat_template.empty() || name == "default") {
        out.config.chat_template = json_fields::string((*t)[i], "template", file, field);
      }
    }
  } else {
    json_fields::bad(file, "chat_template", "expected a string or a list of {name, template}");
  }
}

void read_added_tokens_decoder(const Json& j, const std::string& file, TokenizerConfigFiles& out) {
  const Json* decoder = json_fields::optional_member(j, "added_tokens_decoder");
  if (decoder == nullptr) return;
  if (!decoder->is_object()) json_fields::bad(file, "added_tokens_decoder", "expected an object");
  for (const auto& [key, value] : decoder->items()) {
    const std::string field = "added_tokens_decoder." + json_fields::excerpt(key);
    const std::optional<TokenId> id = id_key(key);
    if (!id) json_fields::bad(file, field, "the key must be a token id (0 to 2^31 - 1)");
    if (!value.is_object()) json_fields::bad(file, field, "expected an object");
    AddedToken t;
    t.id = *id;
    read_added_token_fields(value, file, field, t);
    out.added_tokens.push_back(std::move(t));
  }
}

void read_extra_special_tokens(const Json& j, const std::string& file, TokenizerConfigFiles& out) {
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    const Json* list = json_fields::optional_member(j, key);
    if (list == nullptr) continue;
    if (!list->is_array())
      continue;  // a dict of named extras (multimodal configs): not tokens to add
    for (size_t i = 0; i < list->size(); ++i) {
      if (auto v =
              token_value((*list)[i], file, std::string(key) + "[" + std::to_string(i) + "]")) {
        out.extra_special_tokens.push_back(*v);
      }
    }
  }
}

// Everything tokenizer_config.json (parsed into j) says, with the class defaults for absent keys.
TokenizerConfigFiles config_from_json(const Json& j, const std::string& file) {
  TokenizerConfigFiles out;
  out.file = file;
  if (const auto cls = json_fields::optional_string(j, "tokenizer_class", file, ""))
    out.tokenizer_class = *cls;

  // Keys absent from the config take the class defaults; a key present with null means "none".
  const Defaults d = class_defaults(out.tokenizer_class);
  out.config.bos_token = d.bos;
  out.config.eos_token = d.eos;
  out.config.unk_token = d.unk;
  out.config.pad_token = d.pad;
  read_special(j, file, out, false);

  out.explicit_add_bos_eos = j.contains("add_bos_token") || j.contains("add_eos_token");
  out.config.add_bos_token = json_fields::boolean(j, "add_bos_token", false, file, "");
  out.config.add_eos_token = json_fields::boolean(j, "add_eos_token", false, file, "");
  out.add_prefix_space = json_fields::boolean(j, "add_prefix_space", false, file, "");
  read_chat_template(j, file, out);
  read_added_tokens_decoder(j, file, out);
  read_extra_special_tokens(j, file, out);
  return out;
}

}  // namespace

void read_added_token_fields(const nlohmann::json& entry, const std::string& file,
                             const std::string& path, AddedToken& token) {
  token.content = json_fields::string(entry, "content", file, path);
  token.special = json_fields::boolean(entry, "special", false, file, path);
  token.lstrip = json_fields::boolean(entry, "lstrip", false, file, path);
  token.rstrip = json_fields::boolean(entry, "rstrip", false, file, path);
  token.single_word = json_fields::boolean(entry, "single_word", false, file, path);
  token.normalized = json_fields::boolean(entry, "normalized", !token.special, file, path);
}

TokenizerConfigFiles tokenizer_config_from_text(std::string_view text, const std::string& file) {
  return config_from_json(parse_config(text, file), file);
}

TokenizerConfigFiles read_tokenizer_config(const io::Artifact& artifact) {
  const std::string file = artifact.where(io::kTokenizerConfigFile);
  // Unordered, as tokenizer.json's entries are read (added_tokens_decoder in key order).
  const bool given = artifact.has(io::kTokenizerConfigFile);
  const Json j = given ? Json(artifact.tokenizer_config) : Json::object();
  if (!j.is_object()) json_fields::bad(file, "(root)", "expected an object");
  TokenizerConfigFiles out = config_from_json(j, file);

  // special_tokens_map.json fills the special tokens tokenizer_config.json does not name.
  if (artifact.has(io::kSpecialTokensMapFile)) {
    const Json m(artifact.special_tokens_map);
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      if (!j.contains(key) && m.contains(key)) {
        Json one = Json::object();
        one[key] = m[key];
        read_special(one, artifact.where(io::kSpecialTokensMapFile), out, false);
      }
    }
  }
  if (out.config.chat_template.empty() && artifact.chat_template)
    out.config.chat_template = *artifact.chat_template;
  return out;
}

}  // namespace rqat::tokenizer

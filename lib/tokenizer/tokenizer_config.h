// What transformers reads beside the model files: tokenizer_config.json (special tokens, added
// tokens, add_bos_token/add_eos_token, chat template, tokenizer class), special_tokens_map.json and
// chat_template.jinja, plus the class defaults transformers applies when a key is absent.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace rqat::tokenizer {

struct TokenizerConfigFiles {
  TokenizerConfig config;
  // Whether add_bos_token / add_eos_token were given: transformers then rebuilds the post-processor
  // as [bos] $A [eos] from them, else keeps tokenizer.json's.
  bool explicit_add_bos_eos = false;
  bool add_prefix_space = false;
  std::string tokenizer_class;                    // "" when absent
  std::vector<AddedToken> added_tokens;           // added_tokens_decoder
  std::vector<std::string> extra_special_tokens;  // additional_/extra_special_tokens
  std::string file;  // tokenizer_config.json's name, for errors found when assembling
};

// Content and flags of one added-token entry, as tokenizer.json's added_tokens and
// tokenizer_config.json's added_tokens_decoder both spell them ("normalized" defaults to !special).
void read_added_token_fields(const nlohmann::json& entry, const std::string& file,
                             const std::string& path, AddedToken& token);

// Whatever of the three files the artifact holds (none is required).
TokenizerConfigFiles read_tokenizer_config(const io::Artifact& artifact);

// tokenizer_config.json alone, from its text in memory ("" when there is no such file); `file`
// names it in errors. The same parser as read_tokenizer_config's for that file.
TokenizerConfigFiles tokenizer_config_from_text(std::string_view text, const std::string& file);

}  // namespace rqat::tokenizer

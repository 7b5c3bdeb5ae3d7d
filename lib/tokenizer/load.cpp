// Tokenizer::load: picks tokenizer.json or the legacy files, then merges in what transformers takes
// from tokenizer_config.json: added tokens, special tokens, and the add_bos_token/add_eos_token
// template that replaces tokenizer.json's post-processor when either flag is given.
#include "io/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/json_fields.h"

namespace rqat::tokenizer {
namespace {

// The bound on ids tokenizer.json's added_tokens also obey (kMaxIdHoles beyond all entries), so
// that a config cannot make vocab_size() huge either.
void check_config_ids(const TokenizerParts& parts, const TokenizerConfigFiles& files) {
  const int64_t bound = static_cast<int64_t>(parts.model->size() + parts.added.tokens().size() +
                                             files.added_tokens.size()) +
                        kMaxIdHoles;
  for (const AddedToken& t : files.added_tokens) {
    if (t.id >= bound) {
      fail(
          "{}: added_tokens_decoder.'{}': token {} has id {}, far beyond the {} tokens (ids must "
          "stay below {})",
          files.file, t.id, json_fields::excerpt(t.content), t.id, bound - kMaxIdHoles, bound);
    }
  }
}

// encode(..., true) puts the post-processor's ids in front of and after the text; an id that is
// no token would reach the model's embedding out of range.
void check_post_processor_ids(const TokenizerParts& parts) {
  for (const auto* ids : {&parts.post.prefix, &parts.post.suffix}) {
    for (const TokenId id : *ids) {
      if (parts.model->id_to_token(id) == nullptr && parts.added.find_id(id) == nullptr)
        fail("{}: post_processor: id {} is not a token of the vocabulary", parts.source, id);
    }
  }
}

}  // namespace

std::shared_ptr<const Tokenizer> assemble(TokenizerParts parts, const TokenizerConfigFiles& files) {
  check_config_ids(parts, files);
  for (const AddedToken& t : files.added_tokens) {
    if (!parts.added.find_content(t.content)) parts.added.add(t);
  }
  // Special tokens named in the config but not yet added become special added tokens when the
  // vocabulary has them (transformers would otherwise append new ids; no real config needs that).
  std::vector<std::string> specials = files.extra_special_tokens;
  const TokenizerConfig& c = files.config;
  for (const auto* t : {&c.bos_token, &c.eos_token, &c.unk_token, &c.pad_token}) {
    if (t->has_value()) specials.push_back(**t);
  }
  for (const std::string& content : specials) {
    if (parts.added.find_content(content)) continue;
    if (const auto id = parts.model->token_to_id(content)) {
      AddedToken t;
      t.content = content;
      t.id = *id;
      t.special = true;
      parts.added.add(t);
    }
  }
  parts.added.finish(parts.normalizer);

  parts.config = files.config;
  auto id_of = [&](const std::optional<std::string>& token) -> std::optional<TokenId> {
    if (!token) return std::nullopt;
    if (auto id = parts.added.find_content(*token)) return id;
    return parts.model->token_to_id(*token);
  };
  const auto bos = id_of(c.bos_token), eos = id_of(c.eos_token);
  if (files.explicit_add_bos_eos) {
    parts.post = {};
    if (c.add_bos_token && bos) parts.post.prefix.push_back(*bos);
    if (c.add_eos_token && eos) parts.post.suffix.push_back(*eos);
  }
  // Report what encode(..., true) really does.
  parts.config.add_bos_token =
      bos && !parts.post.prefix.empty() && parts.post.prefix.front() == *bos;
  parts.config.add_eos_token =
      eos && !parts.post.suffix.empty() && parts.post.suffix.back() == *eos;
  check_post_processor_ids(parts);
  return std::make_shared<BpeTokenizer>(std::move(parts));
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json_text(std::string_view tokenizer_json,
                                                           std::string_view tokenizer_config_json,
                                                           const std::filesystem::path& where) {
  const TokenizerConfigFiles files = tokenizer_config_from_text(
      tokenizer_config_json, (where / io::kTokenizerConfigFile).string());
  return assemble(
      parts_from_tokenizer_json_text(tokenizer_json, (where / "tokenizer.json").string()), files);
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const io::Artifact& artifact) {
  const std::filesystem::path& dir = artifact.dir;
  const TokenizerConfigFiles files = read_tokenizer_config(artifact);
  if (artifact.has("tokenizer.json"))
    return assemble(parts_from_tokenizer_json(dir / "tokenizer.json"), files);
  if (artifact.has("vocab.json") && artifact.has("merges.txt"))
    return assemble(parts_from_legacy_files(dir, files), files);
  fail("{}: no tokenizer.json, nor vocab.json + merges.txt", dir.string());
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    fail("{}: not a tokenizer directory (missing)", dir.string());
  return load(io::Artifact::open_any(dir));
}

}  // namespace rqat::tokenizer

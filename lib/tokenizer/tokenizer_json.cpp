// Reads a Hugging Face tokenizer.json into TokenizerParts: a BPE model, normalizer (NFC-family,
// Prepend, Replace, Sequence), pre-tokenizer (Split, ByteLevel, Metaspace, Sequence), decoder
// (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence), post-processor
// (TemplateProcessing, ByteLevel, Roberta/Bert, Sequence) and added_tokens. Anything else is
// refused with the file and field named, rather than silently tokenizing differently.
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {
namespace {

using json_fields::Json;

// Hugging Face pipelines nest Sequences one or two levels deep and chain fewer than ten steps. The
// readers recurse once per Sequence level and every step runs on each encode or decode, so both are
// bounded: the JSON nesting limit (512) alone would still allow 256 recursive levels and a
// million-step chain that makes every encode crawl.
constexpr size_t kMaxSequenceDepth = 64;
constexpr size_t kMaxPipelineSteps = 256;

// Names the component ("normalizer"), not the 64-level path down to the failing Sequence.
void check_sequence_depth(size_t depth, const std::string& file, const std::string& path) {
  if (depth >= kMaxSequenceDepth) {
    json_fields::bad(file, path.substr(0, path.find('.')),
                     "Sequence nested deeper than " + std::to_string(kMaxSequenceDepth) + " levels");
  }
}

void check_step_count(size_t steps, const std::string& file, const std::string& field) {
  if (steps > kMaxPipelineSteps) {
    json_fields::bad(
        file, field,
        std::to_string(steps) + " steps, more than " + std::to_string(kMaxPipelineSteps));
  }
}

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

const Json& array_member(const Json& parent, const std::string& key, const std::string& file,
                         const std::string& path) {
  const Json* value = json_fields::optional_member(parent, key);
  if (value == nullptr) json_fields::bad(file, json_fields::join(path, key), "missing");
  if (!value->is_array()) json_fields::bad(file, json_fields::join(path, key), "expected a list");
  return *value;
}

// A {"String": ...} or {"Regex": ...} pattern (Split, Replace): the literal text, or the regex.
struct Pattern {
  std::string literal;
  std::optional<Regex> regex;
};

Pattern read_pattern(const Json& parent, const std::string& file, const std::string& path) {
  const std::string pattern_path = json_fields::join(path, "pattern");
  const Json& pattern = json_fields::object(parent, "pattern", file, path);
  const auto regex = json_fields::optional_string(pattern, "Regex", file, pattern_path);
  const auto literal = json_fields::optional_string(pattern, "String", file, pattern_path);
  if (!regex && !literal)
    json_fields::bad(file, pattern_path, "expected {\"Regex\": ...} or {\"String\": ...}");
  Pattern out;
  if (regex) {
    out.regex.emplace(*regex, false, file + ": " + json_fields::join(pattern_path, "Regex"));
  } else {
    if (literal->empty())
      json_fields::bad(file, json_fields::join(pattern_path, "String"), "empty");
    out.literal = *literal;
  }
  return out;
}

void read_normalizer(const Json& j, const std::string& file, const std::string& path, size_t depth,
                     Normalizer& out) {
  if (j.is_null()) return;
  if (!j.is_object()) json_fields::bad(file, path, "expected an object or null");
  const std::string type = json_fields::string(j, "type", file, path);
  if (type == "NFC")
    out.add_form(Normalizer::Form::kNFC);
  else if (type == "NFD")
    out.add_form(Normalizer::Form::kNFD);
  else if (type == "NFKC")
    out.add_form(Normalizer::Form::kNFKC);
  else if (type == "NFKD")
    out.add_form(Normalizer::Form::kNFKD);
  else if (type == "Prepend")
    out.add_prepend(json_fields::string(j, "prepend", file, path));
  else if (type == "Replace") {
    Pattern pattern = read_pattern(j, file, path);
    std::string content = json_fields::string(j, "content", file, path);
    if (pattern.regex) {
      out.add_replace(std::move(*pattern.regex), std::move(content));
    } else {
      out.add_replace(std::move(pattern.literal), std::move(content));
    }
  } else if (type == "Sequence") {
    check_sequence_depth(depth, file, path);
    const std::string list_path = json_fields::join(path, "normalizers");
    const Json& list = array_member(j, "normalizers", file, path);
    for (size_t i = 0; i < list.size(); ++i)
      read_normalizer(list[i], file, at(list_path, i), depth + 1, out);
  } else {
    json_fields::bad(file, json_fields::join(path, "type"),
                     "unsupported normalizer '" + type + "'");
  }
}

// Metaspace's placement of the replacement: prepend_scheme, or the older add_prefix_space flag.
PrependScheme read_prepend_scheme(const Json& j, const std::string& file, const std::string& path) {
  if (const auto scheme = json_fields::optional_string(j, "prepend_scheme", file, path)) {
    if (*scheme == "always") return PrependScheme::kAlways;
    if (*scheme == "never") return PrependScheme::kNever;
    if (*scheme == "first") return PrependScheme::kFirst;
    json_fields::bad(file, json_fields::join(path, "prepend_scheme"),
                     "unknown scheme '" + *scheme + "' (always, never, first)");
  }
  return json_fields::boolean(j, "add_prefix_space", true, file, path) ? PrependScheme::kAlways
                                                                       : PrependScheme::kNever;
}

// Metaspace's replacement: one character (tokenizers stores a char).
std::string read_replacement(const Json& j, const std::string& file, const std::string& path) {
  const std::string r = json_fields::string(j, "replacement", file, path);
  char32_t cp = 0;
  if (r.empty() || utf8::decode(r, 0, cp) != r.size())
    json_fields::bad(file, json_fields::join(path, "replacement"), "expected one character");
  return r;
}

SplitBehavior read_behavior(const Json& j, const std::string& file, const std::string& path) {
  const std::string b = json_fields::string(j, "behavior", file, path);
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  json_fields::bad(file, json_fields::join(path, "behavior"), "unknown behavior '" + b + "'");
}

void read_pre_tokenizer(const Json& j, const std::string& file, const std::string& path,
                        size_t depth, PreTokenizer& out) {
  if (j.is_null()) return;
  if (!j.is_object()) json_fields::bad(file, path, "expected an object or null");
  const std::string type = json_fields::string(j, "type", file, path);
  if (type == "Sequence") {
    check_sequence_depth(depth, file, path);
    const std::string list_path = json_fields::join(path, "pretokenizers");
    const Json& list = array_member(j, "pretokenizers", file, path);
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(list[i], file, at(list_path, i), depth + 1, out);
  } else if (type == "ByteLevel") {
    out.add_byte_level({json_fields::boolean(j, "add_prefix_space", true, file, path),
                        json_fields::boolean(j, "use_regex", true, file, path)});
  } else if (type == "Split") {
    const std::string pattern_path = json_fields::join(path, "pattern");
    const Json& pattern = json_fields::object(j, "pattern", file, path);
    const auto regex = json_fields::optional_string(pattern, "Regex", file, pattern_path);
    const auto literal = json_fields::optional_string(pattern, "String", file, pattern_path);
    if (!regex && !literal)
      json_fields::bad(file, pattern_path, "expected {\"Regex\": ...} or {\"String\": ...}");
    const std::string where =
        file + ": " + json_fields::join(pattern_path, regex ? "Regex" : "String");
    out.add_split(SplitStep{Regex(regex ? *regex : *literal, !regex, where),
                            read_behavior(j, file, path),
                            json_fields::boolean(j, "invert", false, file, path)});
  } else if (type == "Metaspace") {
    MetaspaceStep m;
    m.replacement = read_replacement(j, file, path);
    m.prepend_scheme = read_prepend_scheme(j, file, path);
    m.split = json_fields::boolean(j, "split", true, file, path);
    out.add_metaspace(std::move(m));
  } else {
    json_fields::bad(file, json_fields::join(path, "type"),
                     "unsupported pre-tokenizer '" + type + "'");
  }
}

void read_decoder(const Json& j, const std::string& file, const std::string& path, size_t depth,
                  Decoder& out) {
  if (j.is_null()) return;
  if (!j.is_object()) json_fields::bad(file, path, "expected an object or null");
  const std::string type = json_fields::string(j, "type", file, path);
  DecoderStep step;
  if (type == "Sequence") {
    check_sequence_depth(depth, file, path);
    const std::string list_path = json_fields::join(path, "decoders");
    const Json& list = array_member(j, "decoders", file, path);
    for (size_t i = 0; i < list.size(); ++i)
      read_decoder(list[i], file, at(list_path, i), depth + 1, out);
    return;
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    Pattern pattern = read_pattern(j, file, path);
    step.pattern = std::move(pattern.literal);
    step.regex = std::move(pattern.regex);
    step.content = json_fields::string(j, "content", file, path);
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    step.content = json_fields::string(j, "content", file, path);
    char32_t cp = 0;
    if (step.content.empty() || utf8::decode(step.content, 0, cp) != step.content.size())
      json_fields::bad(file, json_fields::join(path, "content"), "expected one character");
    for (const char* key : {"start", "stop"}) {
      const int64_t n = json_fields::integer(j, key, file, path);
      if (n < 0) json_fields::bad(file, json_fields::join(path, key), "must not be negative");
      (std::string_view(key) == "start" ? step.start : step.stop) = static_cast<size_t>(n);
    }
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    step.pattern = read_replacement(j, file, path);
    step.prepend = read_prepend_scheme(j, file, path) != PrependScheme::kNever;
  } else {
    json_fields::bad(
        file, json_fields::join(path, "type"),
        "unsupported decoder '" + type +
            "' (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence of them)");
  }
  out.add(std::move(step));
}

TokenId special_pair_id(const Json& j, const std::string& key, const std::string& file,
                        const std::string& path) {
  const Json* pair = json_fields::optional_member(j, key);
  const std::string field = json_fields::join(path, key);
  if (pair == nullptr || !pair->is_array() || pair->size() != 2) {
    json_fields::bad(file, field, "expected [token, id]");
  }
  return json_fields::token_id((*pair)[1], file, field + "[1]");
}

void read_post_processor(const Json& j, const std::string& file, const std::string& path,
                         size_t depth, PostProcessor& out) {
  if (j.is_null()) return;
  if (!j.is_object()) json_fields::bad(file, path, "expected an object or null");
  const std::string type = json_fields::string(j, "type", file, path);
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "Sequence") {
    check_sequence_depth(depth, file, path);
    const std::string list_path = json_fields::join(path, "processors");
    const Json& list = array_member(j, "processors", file, path);
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(list[i], file, at(list_path, i), depth + 1, out);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    out.prefix = {special_pair_id(j, "cls", file, path)};
    out.suffix = {special_pair_id(j, "sep", file, path)};
    return;
  }
  if (type != "TemplateProcessing") {
    json_fields::bad(file, json_fields::join(path, "type"),
                     "unsupported post-processor '" + type + "'");
  }
  // Each template item is {"SpecialToken": {"id": name}} or {"Sequence": {"id": "A"}}; a special
  // token name stands for the ids listed under special_tokens.
  const std::string single_path = json_fields::join(path, "single");
  const Json& single = array_member(j, "single", file, path);
  const Json* specials = json_fields::optional_member(j, "special_tokens");
  out.prefix.clear();
  out.suffix.clear();
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item_path = at(single_path, i);
    if (const Json* seq = json_fields::optional_member(single[i], "Sequence")) {
      if (seen_sequence)
        json_fields::bad(file, item_path, "a single-sequence template has one Sequence");
      seen_sequence = true;
      (void)seq;
      continue;
    }
    const Json& special = json_fields::object(single[i], "SpecialToken", file, item_path);
    const std::string name =
        json_fields::string(special, "id", file, json_fields::join(item_path, "SpecialToken"));
    const std::string specials_path = json_fields::join(path, "special_tokens");
    if (specials == nullptr || !specials->contains(name)) {
      json_fields::bad(file, json_fields::join(specials_path, name),
                       "missing (used by " + item_path + ")");
    }
    const std::string entry_path = json_fields::join(specials_path, name);
    const Json& ids = array_member((*specials)[name], "ids", file, entry_path);
    for (size_t k = 0; k < ids.size(); ++k) {
      const TokenId id =
          json_fields::token_id(ids[k], file, at(json_fields::join(entry_path, "ids"), k));
      (seen_sequence ? out.suffix : out.prefix).push_back(id);
    }
  }
  if (!seen_sequence) json_fields::bad(file, single_path, "the template has no Sequence");
}

std::unique_ptr<BpeModel> read_model(const Json& root, const std::string& file) {
  const Json& m = json_fields::object(root, "model", file, "");
  if (const auto type = json_fields::optional_string(m, "type", file, "model");
      type && *type != "BPE") {
    json_fields::bad(file, "model.type", "unsupported model '" + *type + "' (BPE only)");
  }
  if (const Json* dropout = json_fields::optional_member(m, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      json_fields::bad(file, "model.dropout", "BPE dropout is not supported (expected null)");
    }
  }
  const Json& vocab_json = json_fields::object(m, "vocab", file, "model");
  TokenMap vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items())
    vocab.emplace(
        token, json_fields::token_id(id, file, "model.vocab[" + json_fields::excerpt(token) + "]"));
  const Json& merges_json = array_member(m, "merges", file, "model");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const Json& item = merges_json[i];
    if (item.is_string()) {
      // "a b": tokens in this form never contain a space (tokens with spaces use the pair form).
      const std::string& s = item.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        json_fields::bad(file, at("model.merges", i),
                         "expected \"a b\" (two tokens separated by one space)");
      }
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
      merges.emplace_back(item[0].get<std::string>(), item[1].get<std::string>());
    } else {
      json_fields::bad(file, at("model.merges", i), "expected \"a b\" or [a, b]");
    }
  }
  BpeOptions options;
  options.unk_token = json_fields::optional_string(m, "unk_token", file, "model");
  options.continuing_subword_prefix =
      json_fields::optional_string(m, "continuing_subword_prefix", file, "model").value_or("");
  options.end_of_word_suffix =
      json_fields::optional_string(m, "end_of_word_suffix", file, "model").value_or("");
  options.fuse_unk = json_fields::boolean(m, "fuse_unk", false, file, "model");
  options.byte_fallback = json_fields::boolean(m, "byte_fallback", false, file, "model");
  options.ignore_merges = json_fields::boolean(m, "ignore_merges", false, file, "model");
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options), file);
}

// Added tokens take ids beside the vocabulary's: below its entries, plus the added tokens, plus the
// holes BpeModel allows (kMaxIdHoles), so that vocab_size() stays the size of the vocabulary.
void read_added_tokens(const Json& root, const std::string& file, TokenizerParts& parts) {
  const Json* added = json_fields::optional_member(root, "added_tokens");
  if (added == nullptr) return;
  if (!added->is_array()) json_fields::bad(file, "added_tokens", "expected a list");
  const int64_t bound = static_cast<int64_t>(parts.model->size() + added->size()) + kMaxIdHoles;
  for (size_t i = 0; i < added->size(); ++i) {
    const Json& a = (*added)[i];
    const std::string p = at("added_tokens", i);
    if (!a.is_object()) json_fields::bad(file, p, "expected an object");
    AddedToken t;
    const std::string id_field = json_fields::join(p, "id");
    const Json* id = json_fields::optional_member(a, "id");
    if (id == nullptr) json_fields::bad(file, id_field, "missing");
    t.id = json_fields::token_id(*id, file, id_field);
    read_added_token_fields(a, file, p, t);
    if (t.id >= bound) {
      json_fields::bad(file, id_field,
                       "token " + json_fields::excerpt(t.content) + " has id " +
                           std::to_string(t.id) + ", far beyond the " +
                           std::to_string(parts.model->size()) + " vocabulary entries and " +
                           std::to_string(added->size()) + " added tokens (ids must stay below " +
                           std::to_string(bound) + ")");
    }
    parts.added.add(t);
  }
}

}  // namespace

TokenizerParts parts_from_tokenizer_json_text(std::string_view text, const std::string& file) {
  const Json root = json_fields::parse(text, file);
  if (!root.is_object()) json_fields::bad(file, "(root)", "expected an object");
  TokenizerParts parts;
  parts.source = file;
  parts.model = read_model(root, file);

  if (root.contains("normalizer")) {
    read_normalizer(root["normalizer"], file, "normalizer", 0, parts.normalizer);
    check_step_count(parts.normalizer.size(), file, "normalizer");
    parts.normalizer.set_where(file + ": normalizer");
  }
  if (root.contains("pre_tokenizer")) {
    read_pre_tokenizer(root["pre_tokenizer"], file, "pre_tokenizer", 0, parts.pre_tokenizer);
    check_step_count(parts.pre_tokenizer.size(), file, "pre_tokenizer");
  }
  Decoder decoder;
  if (root.contains("decoder")) {
    read_decoder(root["decoder"], file, "decoder", 0, decoder);
    check_step_count(decoder.steps().size(), file, "decoder");
    decoder.set_where(file + ": decoder");
  }
  // ByteLevel alone keeps the direct byte-level path; other chains run step by step.
  const auto& steps = decoder.steps();
  parts.byte_level_decoder = steps.size() == 1 && steps[0].kind == DecoderStep::Kind::kByteLevel;
  if (!steps.empty() && !parts.byte_level_decoder) parts.decoder = std::move(decoder);
  if (root.contains("post_processor"))
    read_post_processor(root["post_processor"], file, "post_processor", 0, parts.post);
  read_added_tokens(root, file, parts);
  return parts;
}

TokenizerParts parts_from_tokenizer_json(const std::filesystem::path& path) {
  return parts_from_tokenizer_json_text(json_fields::read_text(path), path.string());
}

}  // namespace rqat::tokenizer

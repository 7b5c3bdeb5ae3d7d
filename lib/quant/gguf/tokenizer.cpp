// See tokenizer.h.
#include "quant/gguf/tokenizer.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "io/artifact.h"
#include "io/error.h"
#include "io/json_file.h"

namespace rqat::quant {

namespace {

using nlohmann::json;

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// Whether a tokenizer.json component (or a Sequence of them) has a part of `type`.
bool has_part(const json& component, std::string_view type) {
  if (!component.is_object()) return false;
  const std::string t = component.value("type", "");
  if (t == type) return true;
  for (const char* list : {"pretokenizers", "decoders", "processors"})
    if (component.contains(list) && component[list].is_array())
      for (const auto& part : component[list])
        if (has_part(part, type)) return true;
  return false;
}

// The Split regex of a pre-tokenizer (or a Sequence holding one), empty when there is none.
std::string split_regex(const json& component) {
  if (!component.is_object()) return "";
  if (component.value("type", "") == "Split" && component.contains("pattern") &&
      component["pattern"].is_object() && component["pattern"].contains("Regex"))
    return component["pattern"]["Regex"].get<std::string>();
  if (component.contains("pretokenizers") && component["pretokenizers"].is_array())
    for (const auto& part : component["pretokenizers"])
      if (std::string r = split_regex(part); !r.empty()) return r;
  return "";
}

// llama.cpp's pre-tokenizer of this regex: Qwen2's splits digits one at a time, Llama 3's in
// runs of up to three; GPT-2's own regex (ByteLevel with use_regex) is "gpt-2".
std::string pre_tokenizer_name(const json& tokenizer, const std::string& where) {
  const json& pre = tokenizer.contains("pre_tokenizer") ? tokenizer["pre_tokenizer"] : json();
  const std::string regex = split_regex(pre);
  if (regex.find("\\p{N}{1,3}") != std::string::npos) return "llama-bpe";
  if (regex.find("\\p{N}") != std::string::npos) return "qwen2";
  if (regex.empty() && pre.is_object() && pre.value("type", "") == "ByteLevel" &&
      pre.value("use_regex", true))
    return "gpt-2";
  fail(
      "{}: GGUF export knows the pre-tokenizers of Qwen2 (digits one by one), Llama 3 (up to "
      "three) and GPT-2; this one's regex is '{}'",
      where, regex);
}

// A tokenizer_config.json token entry: a string, or an object with "content".
std::optional<std::string> token_text(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

// Whether an added token is a control token for llama.cpp: special, or text like "<|...|>".
bool looks_special(const std::string& text, bool special) {
  return special || (text.size() >= 4 && text.starts_with("<|") && text.ends_with("|>")) ||
         text == "<pad>" || text == "<mask>";
}

// Whether the post-processor puts a special token in front of every sequence (Llama 3's
// TemplateProcessing), i.e. llama.cpp must add a BOS.
bool post_processor_adds_bos(const json& tokenizer) {
  if (!tokenizer.contains("post_processor")) return false;
  const json& p = tokenizer["post_processor"];
  if (!p.is_object() || p.value("type", "") != "TemplateProcessing" || !p.contains("single") ||
      !p["single"].is_array() || p["single"].empty())
    return false;
  return p["single"][0].contains("SpecialToken");
}

// The vocabulary, added tokens and merges of tokenizer.json, or of vocab.json + merges.txt with
// tokenizer_config.json's added_tokens_decoder (a "slow" GPT-2 tokenizer directory).
struct BpeFiles {
  json vocab;                                                 // token -> id
  std::vector<std::tuple<int64_t, std::string, bool>> added;  // id, content, special
  std::vector<std::string> merges;
  std::string pre;  // llama.cpp's pre-tokenizer name
};

BpeFiles read_tokenizer_json(const json& tokenizer, const std::string& where) {
  const json& model = tokenizer.at("model");
  if (model.value("type", "") != "BPE")
    fail("{}: GGUF export writes byte-level BPE tokenizers; this one is '{}'", where,
         model.value("type", "?"));
  if (!has_part(tokenizer.value("pre_tokenizer", json()), "ByteLevel") &&
      !has_part(tokenizer.value("decoder", json()), "ByteLevel"))
    fail("{}: GGUF export needs a byte-level BPE (a ByteLevel pre-tokenizer or decoder)", where);
  BpeFiles f;
  f.vocab = model.at("vocab");
  if (tokenizer.contains("added_tokens"))
    for (const auto& a : tokenizer["added_tokens"])
      f.added.emplace_back(a.at("id").get<int64_t>(), a.at("content").get<std::string>(),
                           a.value("special", false));
  for (const auto& merge : model.at("merges")) {
    if (merge.is_string()) {
      f.merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2) {
      f.merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      fail("{}: a merge is neither \"a b\" nor [\"a\", \"b\"]", where);
    }
  }
  f.pre = pre_tokenizer_name(tokenizer, where);
  return f;
}

BpeFiles read_vocab_and_merges(const std::filesystem::path& dir, const json& tokenizer_config,
                               const model::ModelConfig& config) {
  BpeFiles f;
  f.vocab = io::read_unordered_json_file(dir / "vocab.json");
  std::ifstream merges(dir / "merges.txt");
  if (!merges) fail("{}: cannot open", (dir / "merges.txt").string());
  std::string line;
  for (bool first = true; std::getline(merges, line); first = false) {
    if (first && line.starts_with("#version")) continue;
    if (!line.empty()) f.merges.push_back(line);
  }
  if (tokenizer_config.contains("added_tokens_decoder"))
    for (const auto& [id, a] : tokenizer_config["added_tokens_decoder"].items())
      f.added.emplace_back(std::stoll(id), a.at("content").get<std::string>(),
                           a.value("special", false));
  // No pre-tokenizer in these files: the family's (Qwen splits digits one by one, Llama 3 in
  // threes).
  f.pre = config.family == model::Family::kLlama ? "llama-bpe" : "qwen2";
  return f;
}

}  // namespace

void add_gguf_tokenizer(io::GgufWriter& writer, const io::Artifact& artifact,
                        const model::ModelConfig& config) {
  const std::filesystem::path& dir = artifact.dir;
  const std::string where = dir.string();
  // Unordered, as before the artifact held it (added_tokens_decoder in key order).
  const json tokenizer_config =
      artifact.has(io::kTokenizerConfigFile) ? json(artifact.tokenizer_config) : json::object();
  json tokenizer = json::object();
  BpeFiles files;
  if (artifact.has("tokenizer.json")) {
    const auto tokenizer_path = dir / "tokenizer.json";
    tokenizer = io::read_unordered_json_file(tokenizer_path);
    files = read_tokenizer_json(tokenizer, tokenizer_path.string());
  } else if (std::filesystem::exists(dir / "vocab.json") &&
             std::filesystem::exists(dir / "merges.txt")) {
    files = read_vocab_and_merges(dir, tokenizer_config, config);
  } else {
    fail(
        "{}: GGUF export needs the model's tokenizer (tokenizer.json, or vocab.json and "
        "merges.txt)",
        where);
  }

  const int64_t vocab_size = config.vocab_size;
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), kUnused);
  const auto place = [&](int64_t id, const std::string& text, int32_t type) {
    if (id < 0 || id >= vocab_size)
      fail("{}: token id {} ('{}') is outside the model's vocab_size {}", where, id, text,
           vocab_size);
    tokens[static_cast<size_t>(id)] = text;
    types[static_cast<size_t>(id)] = type;
  };
  for (const auto& [text, id] : files.vocab.items()) place(id.get<int64_t>(), text, kNormal);
  for (const auto& [id, text, special] : files.added)
    place(id, text, looks_special(text, special) ? kControl : kUserDefined);
  for (int64_t id = 0; id < vocab_size; ++id)
    if (types[static_cast<size_t>(id)] == kUnused)
      tokens[static_cast<size_t>(id)] = fmt::format("[PAD{}]", id);
  std::vector<std::string> merges = std::move(files.merges);

  const auto id_of = [&](const std::optional<std::string>& text) -> std::optional<int64_t> {
    if (!text) return std::nullopt;
    for (int64_t id = 0; id < vocab_size; ++id)
      if (types[static_cast<size_t>(id)] != kUnused && tokens[static_cast<size_t>(id)] == *text)
        return id;
    return std::nullopt;
  };
  std::optional<int64_t> bos = id_of(token_text(tokenizer_config, "bos_token"));
  if (!bos) bos = config.bos_token_id;
  std::optional<int64_t> eos = id_of(token_text(tokenizer_config, "eos_token"));
  if (!eos && !config.eos_token_ids.empty()) eos = config.eos_token_ids.front();
  const std::optional<int64_t> pad = id_of(token_text(tokenizer_config, "pad_token"));
  bool add_bos = post_processor_adds_bos(tokenizer);
  if (tokenizer_config.contains("add_bos_token") && tokenizer_config["add_bos_token"].is_boolean())
    add_bos = tokenizer_config["add_bos_token"].get<bool>();

  writer.add("tokenizer.ggml.model", std::string("gpt2"));
  writer.add("tokenizer.ggml.pre", files.pre);
  writer.add("tokenizer.ggml.tokens", std::move(tokens));
  writer.add("tokenizer.ggml.token_type", std::move(types));
  writer.add("tokenizer.ggml.merges", std::move(merges));
  const auto add_id = [&](const char* key, const std::optional<int64_t>& id) {
    if (id && *id >= 0 && *id < vocab_size) writer.add(key, static_cast<uint32_t>(*id));
  };
  add_id("tokenizer.ggml.bos_token_id", bos);
  add_id("tokenizer.ggml.eos_token_id", eos);
  add_id("tokenizer.ggml.padding_token_id", pad);
  writer.add("tokenizer.ggml.add_bos_token", add_bos);
  writer.add("tokenizer.ggml.add_eos_token", false);
  if (tokenizer_config.contains("chat_template") && tokenizer_config["chat_template"].is_string())
    writer.add("tokenizer.chat_template", tokenizer_config["chat_template"].get<std::string>());
}

}  // namespace rqat::quant

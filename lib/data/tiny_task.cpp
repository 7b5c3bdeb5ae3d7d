// See tiny_task.h.
#include "data/tiny_task.h"

#include <array>
#include <map>
#include <sstream>
#include <unordered_set>

#include "chat/chat_template.h"
#include "io/atomic_file.h"
#include "io/error.h"
#include "io/manifest.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace rqat::data {
namespace {

struct Person {
  const char* name;
  const char* pronoun;
};
// Few names, items and verbs: enough variety that the model must read the problem, few enough
// that every word becomes one token and is seen often.
constexpr std::array<Person, 6> kPeople = {
    {{"Ann", "She"}, {"Bob", "He"}, {"Mia", "She"}, {"Tom", "He"}, {"Lily", "She"}, {"Sam", "He"}}};
constexpr std::array<const char*, 6> kItems = {"apples", "pens", "cards", "coins", "books", "eggs"};
// "{pronoun} {verb} {n}{tail}."
constexpr std::array<const char*, 3> kAddVerbs = {"buys", "finds", "gets"};
constexpr std::array<const char*, 3> kSubtractVerbs = {"loses", "sells", "uses"};

constexpr int kMaxLevels = 8;
constexpr int64_t kMaxNumber = 999999;
constexpr int64_t kMaxDrawsPerProblem = 10000;

const std::vector<std::string> kSpecialTokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

template <class Array>
const auto& pick(std::mt19937_64& rng, const Array& options) {
  return options[static_cast<size_t>(
      draw_uniform(rng, 0, static_cast<int64_t>(options.size()) - 1))];
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Draws `count` problems whose texts are not in `taken` yet (and adds them to it).
std::vector<TinyProblem> draw_split(uint64_t stream_seed, int64_t count, int levels,
                                    const TinyArithmetic& arithmetic, const std::string& prefix,
                                    std::unordered_set<std::string>& taken) {
  std::mt19937_64 rng(stream_seed);
  std::vector<TinyProblem> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int level = 1 + static_cast<int>(i % levels);
    for (int64_t draws = 0;; ++draws) {
      if (draws == kMaxDrawsPerProblem)
        fail(
            "tiny-task: cannot find a new level-{} problem for {} {} after {} draws; ask for fewer",
            level, prefix, i, draws);
      TinyProblem p = generate_tiny_problem(rng, level, arithmetic);
      if (!taken.insert(p.problem).second) continue;
      p.id = prefix + "-" + std::to_string(i);
      out.push_back(std::move(p));
      break;
    }
  }
  return out;
}

// The pieces of `text` between special tokens: what the tokenizer runs BPE on (specials are
// split out before the pre-tokenizer, so learning merges across them would waste vocabulary).
void append_plain_pieces(const std::string& text, std::vector<std::string>& out) {
  size_t start = 0;
  while (start < text.size()) {
    size_t next = std::string::npos, length = 0;
    for (const std::string& s : kSpecialTokens) {
      const size_t at = text.find(s, start);
      if (at < next) {
        next = at;
        length = s.size();
      }
    }
    if (next == std::string::npos) {
      out.push_back(text.substr(start));
      return;
    }
    if (next > start) out.push_back(text.substr(start, next - start));
    start = next + length;
  }
}

std::string render_document(const chat::ChatTemplate& chat, const TinyProblem& p) {
  return chat.render({{"user", p.problem}, {"assistant", p.solution}}, {false, true});
}

void write_jsonl(const std::filesystem::path& path, const std::vector<TinyProblem>& problems) {
  io::write_file_atomically(path, [&](std::ostream& out) {
    for (const TinyProblem& p : problems) out << to_json(p).dump() << '\n';
  });
}

io::Json tokenizer_config_json() {
  // byte_level_tokenizer_json() numbers the specials right after the 256 byte symbols.
  io::Json decoder = io::Json::object();
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) {
    decoder[std::to_string(256 + i)] = {{"content", kSpecialTokens[i]}, {"lstrip", false},
                                        {"normalized", false},          {"rstrip", false},
                                        {"single_word", false},         {"special", true}};
  }
  return {{"added_tokens_decoder", decoder},
          {"bos_token", nullptr},
          {"chat_template", kTinyChatTemplate},
          {"clean_up_tokenization_spaces", false},
          {"eos_token", "<|im_end|>"},
          {"errors", "replace"},
          {"model_max_length", 1024},
          {"pad_token", "<|endoftext|>"},
          {"split_special_tokens", false},
          // The generic class: it takes tokenizer.json as written (Qwen2Tokenizer may rebuild the
          // pipeline from its own defaults).
          {"tokenizer_class", "PreTrainedTokenizerFast"},
          {"unk_token", nullptr}};
}

// Mean and max token counts of one split, overall and by level.
io::Json token_lengths(const std::vector<TinyProblem>& problems, const tokenizer::Tokenizer& tok,
                       const chat::ChatTemplate& chat) {
  struct Sums {
    int64_t n = 0, prompt = 0, response = 0, max_total = 0;
  };
  std::map<int, Sums> by_level;
  Sums all;
  for (const TinyProblem& p : problems) {
    const std::string prompt = chat.render({{"user", p.problem}});
    const std::string document = render_document(chat, p);
    // The response is what follows the prompt: the solution and the end of the turn.
    const auto prompt_tokens = static_cast<int64_t>(tok.encode(prompt).size());
    const auto total = static_cast<int64_t>(tok.encode(document).size());
    for (Sums* s : {&all, &by_level[p.level]}) {
      ++s->n;
      s->prompt += prompt_tokens;
      s->response += total - prompt_tokens;
      s->max_total = std::max(s->max_total, total);
    }
  }
  auto summary = [](const Sums& s) {
    const double n = static_cast<double>(std::max<int64_t>(s.n, 1));
    return io::Json{{"mean_prompt_tokens", static_cast<double>(s.prompt) / n},
                    {"mean_response_tokens", static_cast<double>(s.response) / n},
                    {"mean_total_tokens", static_cast<double>(s.prompt + s.response) / n},
                    {"max_total_tokens", s.max_total}};
  };
  io::Json out = summary(all);
  io::Json levels = io::Json::object();
  for (const auto& [level, s] : by_level) levels[std::to_string(level)] = summary(s);
  out["by_level"] = levels;
  return out;
}

io::Json level_counts(const std::vector<TinyProblem>& problems) {
  std::map<int, int64_t> counts;
  for (const TinyProblem& p : problems) ++counts[p.level];
  io::Json out = io::Json::object();
  for (const auto& [level, n] : counts) out[std::to_string(level)] = n;
  return out;
}

}  // namespace

const char* const kTinyChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

int64_t draw_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (hi < lo) fail("draw_uniform: empty range [{}, {}]", lo, hi);
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (span == 0) return static_cast<int64_t>(rng());  // the full 64-bit range
  // Outputs below 2^64 mod span would make the low residues more likely: draw again.
  const uint64_t reject_below = (0 - span) % span;
  uint64_t x = rng();
  while (x < reject_below) x = rng();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % span);
}

TinyProblem generate_tiny_problem(std::mt19937_64& rng, int level,
                                  const TinyArithmetic& arithmetic) {
  if (level < 1 || level > kMaxLevels)
    fail("tiny-task: level {} is outside 1..{}", level, kMaxLevels);
  const int64_t max_value = arithmetic.max_value;
  const Person& person = pick(rng, kPeople);
  const std::string item = pick(rng, kItems);
  int64_t value = draw_uniform(rng, 2, arithmetic.max_start);
  TinyProblem p;
  p.level = level;
  p.problem = std::string(person.name) + " has " + std::to_string(value) + " " + item + ".";
  for (int step = 0; step < level; ++step) {
    // Add only while the result can stay <= max_value, subtract only what is there.
    const bool can_add = value < max_value;
    const bool can_subtract = value > 0;
    const bool add = can_add && (!can_subtract || draw_uniform(rng, 0, 1) == 0);
    const int64_t change =
        draw_uniform(rng, 1, std::min(arithmetic.max_change, add ? max_value - value : value));
    const int64_t next = add ? value + change : value - change;
    p.problem += std::string(" ") + person.pronoun + " " +
                 pick(rng, add ? kAddVerbs : kSubtractVerbs) + " " + std::to_string(change) +
                 (add ? " more." : ".");
    p.solution += std::to_string(value) + (add ? "+" : "-") + std::to_string(change) + "=" +
                  std::to_string(next) + "\n";
    value = next;
  }
  // Short question: every token counts when the whole pipeline must run in minutes on a CPU.
  p.problem += " How many " + item + " now?";
  p.solution += "\\boxed{" + std::to_string(value) + "}";
  p.answer = value;
  return p;
}

TinySplits generate_tiny_splits(uint64_t seed, int64_t train, int64_t test, int levels,
                                const TinyArithmetic& arithmetic) {
  if (levels < 1 || levels > kMaxLevels)
    fail("tiny-task: --levels {} is outside 1..{}", levels, kMaxLevels);
  // Bounded so that every number and sum fits easily and a start can always move.
  if (arithmetic.max_start < 2 || arithmetic.max_start > kMaxNumber)
    fail("tiny-task: --max-start {} is outside 2..{}", arithmetic.max_start, kMaxNumber);
  if (arithmetic.max_value < arithmetic.max_start || arithmetic.max_value > kMaxNumber)
    fail("tiny-task: --max-value {} is outside --max-start ({})..{}", arithmetic.max_value,
         arithmetic.max_start, kMaxNumber);
  if (arithmetic.max_change < 1 || arithmetic.max_change > arithmetic.max_value)
    fail("tiny-task: --max-change {} is outside 1..--max-value ({})", arithmetic.max_change,
         arithmetic.max_value);
  if (train < 1) fail("tiny-task: --train {} must be at least 1", train);
  if (test < 0) fail("tiny-task: --test {} must not be negative", test);
  std::unordered_set<std::string> taken;
  TinySplits s;
  // Test first, from its own stream: it is the same for a seed whatever --train is.
  s.test =
      draw_split(splitmix64(seed ^ 0x7465737400000000ULL), test, levels, arithmetic, "test", taken);
  s.train = draw_split(splitmix64(seed ^ 0x747261696E000000ULL), train, levels, arithmetic, "train",
                       taken);
  return s;
}

std::vector<std::string> generate_generic_text(const std::vector<TinyProblem>& train, int64_t count,
                                               uint64_t seed) {
  if (count < 0) fail("tiny-task: --generic {} must not be negative", count);
  // Every word occurrence of the training documents: drawing one uniformly draws words by their
  // frequency.
  std::vector<std::string> words;
  for (const TinyProblem& p : train)
    for (const std::string* text : {&p.problem, &p.solution}) {
      std::istringstream in(*text);
      for (std::string word; in >> word;) words.push_back(word);
    }
  if (words.empty()) fail("tiny-task: no training words to draw generic text from");
  std::mt19937_64 rng(splitmix64(seed ^ 0x67656E6572696300ULL));  // "generic"
  std::vector<std::string> documents;
  documents.reserve(static_cast<size_t>(count));
  for (int64_t d = 0; d < count; ++d) {
    const int64_t length = draw_uniform(rng, 24, 64);
    std::string text;
    int64_t sentence = draw_uniform(rng, 6, 14);
    for (int64_t w = 0; w < length; ++w) {
      if (!text.empty()) text += ' ';
      text +=
          words[static_cast<size_t>(draw_uniform(rng, 0, static_cast<int64_t>(words.size()) - 1))];
      if (--sentence == 0 || w + 1 == length) {
        text += '.';
        sentence = draw_uniform(rng, 6, 14);
      }
    }
    documents.push_back(std::move(text));
  }
  return documents;
}

io::Json to_json(const TinyProblem& p) {
  return {{"id", p.id},
          {"level", p.level},
          {"problem", p.problem},
          {"answer", std::to_string(p.answer)},
          {"solution", p.solution}};
}

io::Json write_tiny_task(const TinyTaskOptions& options) {
  if (options.merges < 0) fail("tiny-task: --merges {} must not be negative", options.merges);
  if (options.out_dir.empty()) fail("tiny-task: --out is empty");
  const TinySplits splits = generate_tiny_splits(options.seed, options.train, options.test,
                                                 options.levels, options.arithmetic);
  const auto tokenizer_dir = options.out_dir / "tokenizer";
  std::filesystem::create_directories(tokenizer_dir);
  write_jsonl(options.out_dir / "train.jsonl", splits.train);
  write_jsonl(options.out_dir / "test.jsonl", splits.test);
  if (options.generic > 0) {
    const auto generic = generate_generic_text(splits.train, options.generic, options.seed);
    io::write_file_atomically(options.out_dir / "generic.jsonl", [&](std::ostream& out) {
      for (size_t i = 0; i < generic.size(); ++i)
        out << io::Json{{"id", "generic-" + std::to_string(i)}, {"text", generic[i]}}.dump()
            << '\n';
    });
  }

  const chat::ChatTemplate chat =
      chat::ChatTemplate::recognize(kTinyChatTemplate, "", "<|im_end|>", "tiny-task template");
  std::vector<std::string> corpus;
  for (const TinyProblem& p : splits.train) append_plain_pieces(render_document(chat, p), corpus);
  const auto merges =
      tokenizer::train_bpe_merges(tokenizer::count_byte_level_words(corpus), {options.merges, 2});
  io::write_json_file(tokenizer_dir / "tokenizer.json",
                      tokenizer::byte_level_tokenizer_json(merges, kSpecialTokens));
  io::write_json_file(tokenizer_dir / io::kTokenizerConfigFile, tokenizer_config_json());

  // Measured with the files as written, through the same loaders the trainers and eval-math use.
  const io::Artifact written = io::Artifact::open_any(tokenizer_dir);
  const auto tok = tokenizer::Tokenizer::load(written);
  const auto loaded_chat = chat::ChatTemplate::load(written);
  io::Json metrics = {{"train", static_cast<int64_t>(splits.train.size())},
                      {"test", static_cast<int64_t>(splits.test.size())},
                      {"train_by_level", level_counts(splits.train)},
                      {"test_by_level", level_counts(splits.test)},
                      {"merges", static_cast<int64_t>(merges.size())},
                      {"vocab_size", tok->vocab_size()},
                      {"eos_token_id", *tok->token_to_id("<|im_end|>")},
                      {"train_tokens", token_lengths(splits.train, *tok, loaded_chat)},
                      {"test_tokens", token_lengths(splits.test, *tok, loaded_chat)}};
  io::Manifest manifest;
  manifest.tool = "rqat tiny-task";
  manifest.config = {{"seed", options.seed},
                     {"train", options.train},
                     {"test", options.test},
                     {"levels", options.levels},
                     {"max_start", options.arithmetic.max_start},
                     {"max_change", options.arithmetic.max_change},
                     {"max_value", options.arithmetic.max_value},
                     {"merges", options.merges},
                     {"generic", options.generic}};
  manifest.metrics = metrics;
  io::write_manifest(options.out_dir, manifest);
  return metrics;
}

}  // namespace rqat::data

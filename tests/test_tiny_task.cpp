// The synthetic task of experiments/tiny and its tokenizer: the seeded integer draw against its
// closed form, determinism and disjoint splits, every solution re-derived from the problem text by
// a parser written here (and graded correct by eval's grader), the BPE trainer on a toy corpus
// whose merges are worked out by hand below, the written tokenizer (digits single tokens, task
// words one token, round trip, ChatML prompt), token lengths within the experiment's budget, and
// init-model --tokenizer.
#include "catch.h"

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "chat/chat_template.h"
#include "data/tiny_task.h"
#include "eval/grader.h"
#include "io/json_file.h"
#include "io/jsonl.h"
#include "test_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "tools/model_commands.h"

namespace {

using namespace rqat;
using data::TinyProblem;
using rqat::test::require_error;
using rqat::test::TempDir;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Re-derives a problem's answer from its words alone: the start ("X has N items."), then one
// sentence per operation, "more." meaning add; checks the solution's lines against it.
void check_problem(const TinyProblem& p, const data::TinyArithmetic& ranges = {}) {
  INFO(p.problem << "\n" << p.solution);
  static const std::regex start_re(R"(^(\w+) has (\d+) (\w+)\.)");
  static const std::regex step_re(R"( (She|He) ([a-z ]+?) (\d+)( more)?\.)");
  static const std::regex line_re(R"(^(\d+)([+-])(\d+)=(\d+)$)");
  std::smatch m;
  REQUIRE(std::regex_search(p.problem, m, start_re));
  const std::string item = m[3];
  int64_t value = std::stoll(m[2]);
  CHECK(value >= 2);
  CHECK(value <= ranges.max_start);
  CHECK(p.problem.ends_with(" How many " + item + " now?"));
  const auto lines = lines_of(p.solution);
  REQUIRE(lines.size() == static_cast<size_t>(p.level) + 1);
  size_t step = 0;
  for (auto it = std::sregex_iterator(p.problem.begin(), p.problem.end(), step_re);
       it != std::sregex_iterator(); ++it, ++step) {
    REQUIRE(step < static_cast<size_t>(p.level));
    const int64_t change = std::stoll((*it)[3]);
    const bool add = (*it)[4].matched;
    CHECK(change >= 1);
    CHECK(change <= ranges.max_change);
    std::smatch l;
    REQUIRE(std::regex_match(lines[step], l, line_re));
    CHECK(std::stoll(l[1]) == value);
    CHECK(l[2] == (add ? "+" : "-"));
    CHECK(std::stoll(l[3]) == change);
    value = add ? value + change : value - change;
    CHECK(std::stoll(l[4]) == value);
    CHECK(value >= 0);
    CHECK(value <= ranges.max_value);
  }
  CHECK(step == static_cast<size_t>(p.level));
  CHECK(lines.back() == "\\boxed{" + std::to_string(value) + "}");
  CHECK(p.answer == value);
}

}  // namespace

TEST_CASE("draw_uniform: a power-of-two span is the output modulo the span; bounds; balance") {
  std::mt19937_64 a(123), b(123);
  for (int i = 0; i < 1000; ++i)
    REQUIRE(data::draw_uniform(a, 3, 10) == 3 + static_cast<int64_t>(b() % 8));
  // Span 7: each value should get 1/7 of 70,000 draws (sd about 93); 5 sd is a generous bound.
  std::mt19937_64 rng(9);
  std::map<int64_t, int> counts;
  for (int i = 0; i < 70000; ++i) ++counts[data::draw_uniform(rng, -2, 4)];
  REQUIRE(counts.size() == 7);
  for (const auto& [v, n] : counts) {
    CHECK(v >= -2);
    CHECK(v <= 4);
    CHECK(std::abs(n - 10000) < 470);
  }
  require_error([&] { data::draw_uniform(rng, 5, 4); }, {"empty range"});
}

TEST_CASE("tiny task: deterministic for a seed, different for another, test split fixed") {
  const auto s1 = data::generate_tiny_splits(5, 300, 60, 3);
  const auto s2 = data::generate_tiny_splits(5, 300, 60, 3);
  const auto other = data::generate_tiny_splits(6, 300, 60, 3);
  const auto more_train = data::generate_tiny_splits(5, 500, 60, 3);
  auto texts = [](const std::vector<TinyProblem>& v) {
    std::vector<std::string> out;
    for (const auto& p : v) out.push_back(p.id + "|" + p.problem + "|" + p.solution);
    return out;
  };
  CHECK(texts(s1.train) == texts(s2.train));
  CHECK(texts(s1.test) == texts(s2.test));
  CHECK(texts(s1.test) == texts(more_train.test));
  int same = 0;
  for (size_t i = 0; i < s1.train.size(); ++i)
    same += s1.train[i].problem == other.train[i].problem;
  CHECK(same < 5);
}

TEST_CASE("tiny task: disjoint splits, levels respected, every answer follows from the problem") {
  const int levels = 4;
  const auto s = data::generate_tiny_splits(11, 2000, 200, levels);
  REQUIRE(s.train.size() == 2000);
  REQUIRE(s.test.size() == 200);
  std::set<std::string> test_texts, train_texts;
  for (const auto& p : s.test) CHECK(test_texts.insert(p.problem).second);
  for (const auto& p : s.train) {
    CHECK(train_texts.insert(p.problem).second);
    CHECK(test_texts.count(p.problem) == 0);
  }
  for (const auto* split : {&s.train, &s.test}) {
    for (size_t i = 0; i < split->size(); ++i) {
      const TinyProblem& p = (*split)[i];
      REQUIRE(p.level == 1 + static_cast<int>(i % levels));
      check_problem(p);
    }
  }
  // eval-math's grader reads the boxed answer of the solution as the gold answer, and not another.
  for (size_t i = 0; i < 40; ++i) {
    const TinyProblem& p = s.test[i];
    CHECK(eval::grade(p.solution, std::to_string(p.answer)).kind == eval::GradeKind::equal);
    CHECK(eval::grade(p.solution, std::to_string(p.answer + 1)).kind == eval::GradeKind::not_equal);
  }
  require_error([] { data::generate_tiny_splits(1, 10, 10, 0); }, {"--levels"});
  require_error([] { data::generate_tiny_splits(1, 0, 10, 2); }, {"--train"});
  // Level 1 from one start has few distinct texts: asking for too many is a clear error.
  require_error([] { data::generate_tiny_splits(1, 200000, 0, 1); }, {"ask for fewer"});
}

TEST_CASE("tiny task: wider number ranges are respected and reached; bad ranges are refused") {
  const data::TinyArithmetic wide{.max_start = 60, .max_change = 40, .max_value = 99};
  const auto s = data::generate_tiny_splits(4, 1500, 100, 4, wide);
  int64_t largest_start = 0, largest_change = 0, largest_value = 0;
  for (const auto* split : {&s.train, &s.test}) {
    for (const TinyProblem& p : *split) {
      check_problem(p, wide);
      for (const std::string& line : lines_of(p.solution)) {
        static const std::regex line_re(R"(^(\d+)([+-])(\d+)=(\d+)$)");
        std::smatch l;
        if (!std::regex_match(line, l, line_re)) continue;
        largest_change = std::max<int64_t>(largest_change, std::stoll(l[3]));
        largest_value = std::max<int64_t>(largest_value, std::stoll(l[4]));
      }
      largest_start = std::max<int64_t>(largest_start, std::stoll(lines_of(p.solution)[0]));
    }
  }
  // The bounds are reached, not just respected: the ranges change the task.
  CHECK(largest_start == 60);
  CHECK(largest_change == 40);
  CHECK(largest_value == 99);
  // The default ranges are the first task's: its problems are unchanged.
  const auto defaults = data::generate_tiny_splits(5, 50, 10, 3);
  const auto explicit_defaults =
      data::generate_tiny_splits(5, 50, 10, 3, {.max_start = 20, .max_change = 9, .max_value = 49});
  for (size_t i = 0; i < defaults.train.size(); ++i)
    CHECK(defaults.train[i].solution == explicit_defaults.train[i].solution);
  require_error([] { data::generate_tiny_splits(1, 10, 10, 2, {.max_start = 1}); },
                {"--max-start"});
  require_error(
      [] { data::generate_tiny_splits(1, 10, 10, 2, {.max_start = 30, .max_value = 20}); },
      {"--max-value"});
  require_error([] { data::generate_tiny_splits(1, 10, 10, 2, {.max_change = 0}); },
                {"--max-change"});
}

TEST_CASE("BPE trainer: merges of a toy corpus worked out by hand") {
  // Pairs (count): h-u 15, u-g 20, p-u 17, u-n 16, b-u 4, g-s 5.
  // 1. u+g (20). 2. u+n (16). 3. h+ug (10 + 5). 4. p+un (12). Then p-ug 5, hug-s 5, b-un 4:
  // 5. the tie at 5 goes to the smaller pair in byte order, (hug, s) < (p, ug). 6. p+ug. 7. b+un.
  const std::map<std::string, int64_t> words = {
      {"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}};
  const auto merges = tokenizer::train_bpe_merges(words, {100, 2});
  const std::vector<std::tuple<std::string, std::string, int64_t>> expected = {
      {"u", "g", 20},  {"u", "n", 16}, {"h", "ug", 15}, {"p", "un", 12},
      {"hug", "s", 5}, {"p", "ug", 5}, {"b", "un", 4}};
  REQUIRE(merges.size() == expected.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    CHECK(merges[i].left == std::get<0>(expected[i]));
    CHECK(merges[i].right == std::get<1>(expected[i]));
    CHECK(merges[i].count == std::get<2>(expected[i]));
  }
  CHECK(tokenizer::train_bpe_merges(words, {3, 2}).size() == 3);
  CHECK(tokenizer::train_bpe_merges(words, {100, 5}).size() == 6);  // b+un (4) is below 5

  // Overlapping pairs: "aaaa" holds a-a three times; merging left to right gives aa|aa, whose
  // one remaining pair is below the default minimum of 2.
  const auto overlap = tokenizer::train_bpe_merges({{"aaaa", 1}}, {10, 1});
  REQUIRE(overlap.size() == 2);
  CHECK(overlap[0].count == 3);
  CHECK((overlap[1].left == "aa" && overlap[1].right == "aa" && overlap[1].count == 1));
  CHECK(tokenizer::train_bpe_merges({{"aaaa", 1}}, {10, 2}).size() == 1);

  // The written tokenizer: bytes 0..255, then the specials, then each merge's new token.
  TempDir dir("tiny_bpe");
  const auto json = tokenizer::byte_level_tokenizer_json(merges, {"<|endoftext|>", "<|im_end|>"});
  io::write_json_file(dir / "tokenizer.json", json);
  const auto tok = tokenizer::Tokenizer::load(dir.path());
  CHECK(tok->vocab_size() == 256 + 2 + 7);
  CHECK(tok->token_to_id("a") == 'a');
  CHECK(tok->token_to_id("<|im_end|>") == 257);
  CHECK(tok->token_to_id("hugs") == 258 + 4);
  CHECK(tok->encode("hugs") == std::vector<tokenizer::TokenId>{258 + 4});
  CHECK(tok->encode("bugs") == std::vector<tokenizer::TokenId>{'b', 258 + 0, 's'});
  CHECK(tok->encode("pun<|im_end|>") == std::vector<tokenizer::TokenId>{258 + 3, 257});
}

TEST_CASE("BPE trainer: byte-level words as the Qwen2 pre-tokenizer cuts them") {
  const auto counts = tokenizer::count_byte_level_words({"Ann has 12 apples.\n", "Ann has 3"});
  // "\xC4\xA0" is the byte-level symbol of a space, "\xC4\x8A" that of "\n".
  const std::map<std::string, int64_t> expected = {{"Ann", 2},
                                                   {"\xC4\xA0has", 2},
                                                   {"\xC4\xA0", 2},
                                                   {"1", 1},
                                                   {"2", 1},
                                                   {"3", 1},
                                                   {"\xC4\xA0"
                                                    "apples",
                                                    1},
                                                   {".\xC4\x8A", 1}};
  CHECK(counts == expected);
}

TEST_CASE("tiny task: written files, tokenizer, chat prompt and token budget") {
  TempDir dir("tiny_task");
  data::TinyTaskOptions o;
  o.out_dir = dir.path();
  o.seed = 3;
  o.train = 600;
  o.test = 90;
  o.levels = 3;
  const io::Json metrics = data::write_tiny_task(o);
  const auto splits = data::generate_tiny_splits(3, 600, 90, 3);

  // The JSONL records are the generated problems.
  using Split = std::pair<std::string, const std::vector<TinyProblem>*>;
  for (const auto& [file, split] :
       std::vector<Split>{{"train.jsonl", &splits.train}, {"test.jsonl", &splits.test}}) {
    size_t i = 0;
    io::for_each_jsonl_object<io::Json>(dir / file, [&](const io::Json& row, size_t) {
      REQUIRE(i < split->size());
      CHECK(row == data::to_json((*split)[i]));
      ++i;
    });
    CHECK(i == split->size());
  }
  const io::Json manifest = io::read_json_file(dir / "manifest.json");
  CHECK(manifest["tool"] == "rqat tiny-task");
  CHECK(manifest["metrics"]["test_by_level"]["3"] == 30);

  const auto tok = tokenizer::Tokenizer::load(dir / "tokenizer");
  CHECK(tok->token_to_id("<|endoftext|>") == 256);
  CHECK(tok->token_to_id("<|im_start|>") == 257);
  CHECK(tok->token_to_id("<|im_end|>") == 258);
  CHECK(tok->config().eos_token == "<|im_end|>");
  for (char d = '0'; d <= '9'; ++d) CHECK(tok->encode(std::string(1, d)).size() == 1);
  CHECK(tok->encode("49").size() == 2);
  CHECK(tok->encode("7+5=12\n").size() == 7);
  for (const char* word : {" apples", " has", " How", " many", " now", " more", " buys", " sells",
                           " She", "\\boxed", "Ann", "Lily", "user", "assistant"}) {
    INFO(word);
    CHECK(tok->encode(word).size() == 1);
  }

  const auto chat = chat::ChatTemplate::load(dir / "tokenizer");
  CHECK(chat.format() == chat::Format::kChatML);
  int64_t longest = 0;
  for (const auto* split : {&splits.train, &splits.test}) {
    for (const TinyProblem& p : *split) {
      const std::string prompt = chat.render({{"user", p.problem}});
      REQUIRE(prompt == "<|im_start|>user\n" + p.problem + "<|im_end|>\n<|im_start|>assistant\n");
      const std::string document = prompt + p.solution + "<|im_end|>\n";
      const auto ids = tok->encode(document);
      REQUIRE(tok->decode(ids) == document);
      longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
    }
  }
  // The budget of experiments/tiny: every stage must fit in minutes on two cores.
  CHECK(longest <= 70);
  CHECK(metrics["train_tokens"]["max_total_tokens"].get<int64_t>() <= longest);
  CHECK(metrics["vocab_size"].get<int64_t>() == tok->vocab_size());
}

TEST_CASE("init-model --tokenizer copies the tokenizer and checks the vocabulary fits") {
  TempDir dir("tiny_init");
  const auto tok_dir = dir / "tok";
  std::filesystem::create_directories(tok_dir);
  io::write_json_file(tok_dir / "tokenizer.json",
                      tokenizer::byte_level_tokenizer_json({{"a", "b", 3}}, {"<|im_end|>"}));
  io::write_json_file(tok_dir / "tokenizer_config.json", {{"eos_token", "<|im_end|>"}});
  auto write_config = [&](int64_t vocab) {
    io::Json c = {{"model_type", "qwen3"},
                  {"hidden_size", 32},
                  {"intermediate_size", 64},
                  {"num_hidden_layers", 1},
                  {"num_attention_heads", 2},
                  {"num_key_value_heads", 1},
                  {"head_dim", 16},
                  {"vocab_size", vocab},
                  {"rms_norm_eps", 1e-6},
                  {"tie_word_embeddings", true},
                  {"max_position_embeddings", 64},
                  {"rope_theta", 10000.0}};
    io::write_json_file(dir / "config.json", c);
  };
  tools::InitModelOptions o;
  o.config_json = dir / "config.json";
  o.out_dir = dir / "model";
  o.tokenizer_dir = tok_dir;
  write_config(200);
  require_error([&] { tools::init_model_dir(o); }, {"vocab_size 200", "--tokenizer"});
  write_config(258);
  tools::init_model_dir(o);
  CHECK(test::read_bytes(dir / "model" / "tokenizer.json") ==
        test::read_bytes(tok_dir / "tokenizer.json"));
  CHECK(test::read_bytes(dir / "model" / "tokenizer_config.json") ==
        test::read_bytes(tok_dir / "tokenizer_config.json"));
}

TEST_CASE("generic text: the training words by their frequency, without the task's structure") {
  const auto splits = data::generate_tiny_splits(3, 400, 20, 6, {40, 19, 99});
  const auto a = data::generate_generic_text(splits.train, 300, 3);
  CHECK(a == data::generate_generic_text(splits.train, 300, 3));  // seeded
  CHECK(a != data::generate_generic_text(splits.train, 300, 4));
  REQUIRE(a.size() == 300);
  std::map<std::string, double> train_counts, generic_counts;
  double train_total = 0, generic_total = 0;
  for (const auto& p : splits.train)
    for (const std::string* text : {&p.problem, &p.solution}) {
      std::istringstream in(*text);
      for (std::string w; in >> w; ++train_total) ++train_counts[w];
    }
  for (const auto& doc : a) {
    std::istringstream in(doc);
    int words = 0;
    for (std::string w; in >> w; ++words, ++generic_total) {
      if (w.back() == '.' && !train_counts.count(w)) w.pop_back();  // the sentence ends it adds
      INFO(w);
      CHECK(train_counts.count(w) == 1);  // only words of the training documents
      ++generic_counts[w];
    }
    CHECK(words >= 24);
    CHECK(words <= 64);
    CHECK(doc.back() == '.');
  }
  // Frequencies follow the training text's: every word with at least 2% of the training words is
  // within 30% of its share (about 13,000 draws: a share's SE is under 10% of it there).
  for (const auto& [word, count] : train_counts) {
    const double share = count / train_total;
    if (share < 0.02) continue;
    INFO(word << " " << share);
    CHECK(generic_counts[word] / generic_total == Approx(share).epsilon(0.3));
  }
  require_error([&] { data::generate_generic_text(splits.train, -1, 3); }, {"--generic -1"});
}

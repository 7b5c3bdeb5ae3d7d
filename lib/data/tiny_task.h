// The synthetic task of the tiny Reasoning-QAT reproduction (experiments/tiny): seeded multi-step
// add/subtract word problems ("Ann has 7 apples. She buys 5 more. She sells 3. How many apples
// now?") whose chain-of-thought solution is one line per step ("7+5=12") and "\boxed{answer}",
// short enough (about 60 tokens with the chat template) for a model of a few hundred thousand
// parameters to learn on a laptop CPU; plus a byte-level BPE tokenizer trained on it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/json_file.h"

namespace rqat::data {

// Uniform integer in [lo, hi] from the raw 64-bit outputs (rejection sampling): the standard fixes
// mt19937_64's outputs but not std::uniform_int_distribution's mapping, so this keeps the data
// identical on every platform and standard library.
int64_t draw_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi);

struct TinyProblem {
  std::string id;        // "train-12", "test-3"
  int level = 1;         // number of operations
  std::string problem;   // the word problem (the user turn)
  std::string solution;  // "7+5=12\n12-3=9\n\boxed{9}" (the response the model learns)
  int64_t answer = 0;
};

// The number ranges, which set how many arithmetic facts the model must hold: a start in
// 2..max_start, each change in 1..max_change, every intermediate result in [0, max_value]. The
// defaults (20, 9, 49: about 900 facts) are the task the first tiny teacher was trained on; wider
// ranges make a task that fills a small model, so that quantization noise costs accuracy.
struct TinyArithmetic {
  int64_t max_start = 20;
  int64_t max_change = 9;
  int64_t max_value = 49;
};

// One problem with `level` operations drawn from rng.
TinyProblem generate_tiny_problem(std::mt19937_64& rng, int level,
                                  const TinyArithmetic& arithmetic = {});

struct TinySplits {
  std::vector<TinyProblem> train, test;
};

// `test` and `train` problems; problem i of a split has level 1 + i % levels. The two splits use
// independent streams derived from the seed, and a problem text appears at most once in both
// together (train never repeats a test problem), so the test split does not change with --train.
TinySplits generate_tiny_splits(uint64_t seed, int64_t train, int64_t test, int levels,
                                const TinyArithmetic& arithmetic = {});

// {"id", "level", "problem", "answer" (string), "solution"}: the JSONL record.
io::Json to_json(const TinyProblem& p);

// The ChatML template (Jinja) written to tokenizer_config.json: rqat renders it as its chatml
// format and transformers' apply_chat_template gives the same text.
extern const char* const kTinyChatTemplate;

struct TinyTaskOptions {
  std::filesystem::path out_dir;
  uint64_t seed = 0;
  int64_t train = 20000;
  int64_t test = 300;
  int levels = 3;
  TinyArithmetic arithmetic;
  int64_t merges = 400;  // at most; training stops earlier when no pair repeats
  int64_t generic = 0;   // documents of generic text (generic.jsonl); 0: none
};

// `count` documents of "generic text" for the calibration-domain arm (study B's finding 4): words
// of the training documents drawn by their frequency, 24-64 to a document, in sentences of 6-14
// words. The task's vocabulary without its structure (no problems, no reasoning), the way generic
// web text shares a reasoning model's tokens but not its traces' form. Seeded; its own stream.
std::vector<std::string> generate_generic_text(const std::vector<TinyProblem>& train, int64_t count,
                                               uint64_t seed);

// Writes out_dir/{train.jsonl, test.jsonl, generic.jsonl when asked, tokenizer/tokenizer.json,
// tokenizer/tokenizer_config.json, manifest.json} and returns the manifest's metrics (counts per
// level, token lengths, vocabulary). The tokenizer's merges are learned from the train split
// rendered as chat documents.
io::Json write_tiny_task(const TinyTaskOptions& options);

}  // namespace rqat::data

// OUT/samples.partial.jsonl: eval-math's finished samples, appended and flushed one line each as
// generation goes, so an evaluation that is killed (a preempted job, SIGTERM from `rqat run`)
// continues where it stopped instead of generating them again. The first line holds the
// evaluation's fingerprint; a file of other settings is not reused. The file is removed once the
// evaluation's outputs are written.
//
// Samples are keyed by (problem id, sample index): a sample's tokens depend only on the run seed,
// the problem id and its index (tools/eval_run/evaluate.h problem_seed, generation/sampler.h), so a
// sample kept from a killed run is the sample a whole run makes. --limit and --n are therefore
// not part of the fingerprint: raising them reuses what is there.
//
// The fingerprint says the settings match, not that the file is sound: a kept sample is checked
// against the model that resumes (its token ids inside the vocabulary, its text the decoding of
// its ids), and one that fails is dropped and generated again, with one warning line naming the
// file and the count (a file edited, damaged on disk, or written by another build).
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "generation/generation_engine.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace rqat::eval {

// Whether a kept sample is one the resuming model could have made (see above).
using SampleCheck = std::function<bool(const generation::GenerationResult&)>;

// The check eval-math uses: every token id in [0, vocab_size) and `text` equal to
// generation::completion_text of the ids (no stop strings: eval-math sets none).
SampleCheck sample_matches_model(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                 int64_t vocab_size);

class PartialSamples {
 public:
  // Reads `file` when it exists and its fingerprint is `fingerprint` (a torn last line, from a
  // kill during a write, is dropped), then keeps it open for appending. A file with another
  // fingerprint is started over, saying so on `log`. Kept samples that fail `check` (when set)
  // are dropped, counted in one line on `log`.
  PartialSamples(std::filesystem::path file, io::Json fingerprint, std::ostream& log,
                 const SampleCheck& check = {});

  // The kept sample, or null.
  const generation::GenerationResult* find(const std::string& problem_id, int sample) const;
  size_t size() const { return kept_.size(); }

  // Appends one finished sample and flushes it to the file.
  void append(const std::string& problem_id, const generation::GenerationResult& result);

  // Removes the file (the evaluation's outputs hold everything now).
  void remove();

  const std::filesystem::path& path() const { return file_; }

 private:
  std::filesystem::path file_;
  std::map<std::pair<std::string, int>, generation::GenerationResult> kept_;
  std::ofstream out_;
};

}  // namespace rqat::eval

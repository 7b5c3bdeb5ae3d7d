// Helpers shared by the tests: temporary directories, tiny configs of each family, error checks.
#pragma once

#include "catch.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/decoder.h"
#include "model/model_config.h"
#include "ops/low_bit_weight.h"
#include "tokenizer/tokenizer.h"

namespace rqat::test {

// A fresh, empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Tiny configs with awkward shapes: GQA ratio 3, head_dim != hidden/heads, odd vocab sizes.
model::ModelConfig tiny_config(model::Family family, bool tied);

// A tiny random model of a family (std 0.2), with non-trivial norms and biases so that a wrong name
// or a skipped term changes the outputs.
std::shared_ptr<model::CausalLM> random_tiny_model(model::Family family, bool tied,
                                                   uint64_t seed = 1);

// Appends tokens[i] to seqs[i] through the paged forward: reserves their blocks (REQUIREd to fit),
// runs one step, advances their lengths; returns each row's last logits (B, vocab).
at::Tensor paged_forward(model::CausalLM& model, model::PagedKVCache& cache,
                         const std::vector<model::PagedSequence*>& seqs,
                         const std::vector<std::span<const int32_t>>& tokens);

// The generation engine's path over a batch given as a (left-padded) full-sequence batch: each
// row's real tokens among the first `prompt` columns are prefilled into a paged KV cache (blocks of
// `block_size`), then every later column is decoded one token per step. Returns (B, T, vocab)
// logits filled at the last real prompt position and at every decoded position (zeros elsewhere),
// to compare with the full forward there.
at::Tensor paged_cached_logits(model::CausalLM& model, const at::Tensor& ids,
                               const at::Tensor& mask, int64_t prompt, int64_t block_size = 4);

// For the mains of the CUDA kernel tests: 77 (CTest's skip code), after printing why, without CUDA
// kernels in the build or without a GPU; 0 when the tests can run.
int cuda_tests_skipped();

// Random packed low-bit weights for the kernel tests: codes and zeros uniform in [0, 2^bits),
// scales in [0.01, 0.11), `group` -1 for one group per row, a random act-order column order if
// `permuted`.
ops::LowBitWeight random_low_bit_weight(at::Generator& gen, int bits, int64_t out, int64_t in,
                                        int64_t group, bool permuted);

// `length` token ids drawn uniformly from [0, vocab) by a seeded generator.
std::vector<int32_t> random_tokens(int64_t length, uint64_t seed, int64_t vocab = 97);

// ../shared/data (the project's read-only real data): $RQAT_SHARED_DATA, else the folder beside the
// source tree. Tests that need it print "SKIPPED: ..." and return when it is absent.
std::filesystem::path shared_data_dir();

// The llama2.c stories260K model of ../shared/data/tinyllama converted into dir/model (a Hugging
// Face directory with its tokenizer); nullopt, after printing "SKIPPED: ...", when it is absent.
std::optional<std::filesystem::path> convert_stories260k(const TempDir& dir);

// The rows of a training run's metrics.jsonl (train/step_metrics_log.h) in one series, in order.
std::vector<nlohmann::ordered_json> metrics_rows(const std::filesystem::path& run_dir,
                                                 const std::string& series);

// Runs fn, requires it to throw rqat::Error whose message is one line and contains every needle.
void require_error(const std::function<void()>& fn, std::initializer_list<std::string> needles);

// A byte-level BPE tokenizer without merges written into `dir` (token id = byte value) with the
// special tokens <|endoftext|> = 256, <|im_start|> = 257, <|im_end|> = 258 and a ChatML template.
std::shared_ptr<const tokenizer::Tokenizer> byte_level_test_tokenizer(const TempDir& dir);

// DIR/model: a random tiny untied Qwen3 (seed 5, std 0.1) whose 260 ids cover the byte-level test
// tokenizer (eos <|im_end|>), saved with that tokenizer; returns its directory.
std::filesystem::path write_byte_level_model(const TempDir& dir);

void write_bytes(const std::filesystem::path& path, const std::string& bytes);
std::string read_bytes(const std::filesystem::path& path);

// Same shape and the same bytes (a bit-exact kernel against its twin; NaNs must match bit for bit).
bool same_bits(const at::Tensor& a, const at::Tensor& b);

// max |got - want| over max |want|, in float64 (want usually a float64 reference).
double relative_to_largest(const at::Tensor& got, const at::Tensor& want);

}  // namespace rqat::test

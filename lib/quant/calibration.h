// Calibration data for PTQ (GPTQ Hessians, AWQ activation statistics): N samples of exactly
// seq_len tokens drawn deterministically by a seed from a text or JSONL file, and a record of
// exactly which tokens were used (the calibration domain is an ablation axis of the study).
//
// Sampling (decided once per set, written in the record as "sampling"):
//   - "windows": when the documents with at least seq_len tokens hold num_samples * seq_len
//     tokens or more, each sample is a window of one such document: the document is drawn
//     uniformly among them and the start uniformly among its valid offsets (GPTQ's C4 recipe).
//   - "chunks": otherwise (short documents) all documents are concatenated in file order into one
//     token stream, cut into consecutive non-overlapping seq_len chunks, and num_samples distinct
//     chunks are drawn without replacement. A sample may then span several documents; each piece
//     is recorded as a segment.
// Too few tokens for num_samples distinct chunks is an error, raised before any model is loaded.
//
// The random draws use std::mt19937_64 with an explicit rejection-sampling mapping to integers,
// so a seed gives the same samples on every platform and standard library.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/text_dataset.h"
#include "io/json_file.h"

namespace rqat::quant {

struct CalibrationOptions {
  data::TextDataOptions data;  // path, format, fields, chat template use (its loss mask unused)
  int64_t num_samples = 128;
  int64_t seq_len = 2048;                // requested; capped at max_positions when that is smaller
  std::optional<int64_t> max_positions;  // the model's max_position_embeddings, when known
  uint64_t seed = 0;
};

// One contiguous piece of a sample: `length` tokens of document `document` (0-based index, first
// line `line` in the source file) starting at token `token_offset` of that document.
struct CalibrationSegment {
  int64_t document = 0;
  int64_t line = 0;
  int64_t token_offset = 0;
  int64_t length = 0;
};

struct CalibrationSet {
  at::Tensor input_ids;                                  // (num_samples, seq_len) int64, on the CPU
  std::vector<std::vector<CalibrationSegment>> samples;  // per row, segments in token order
  std::string sampling;                                  // "windows" | "chunks"
  int64_t seq_len = 0;                                   // used (after capping)
  int64_t seq_len_requested = 0;
  int64_t documents = 0;  // documents read from the source
  int64_t source_tokens = 0;
  io::Json record;  // for the artifact manifest: source, fields, seed, sampling, every segment
};

// Tokenizes the source and draws the samples. `chat` is required when
// options.data.use_chat_template. Errors (bad options, unreadable or corrupt file, too few
// tokens) are one line naming the file or option.
CalibrationSet build_calibration_set(const CalibrationOptions& options,
                                     const tokenizer::Tokenizer& tokenizer,
                                     const chat::ChatTemplate* chat = nullptr);

// FNV-1a 64 of the ids (as little-endian int64), hex: lets a reader check a tensor against a
// record without storing the tokens.
std::string token_fingerprint(const at::Tensor& input_ids);

}  // namespace rqat::quant

// See calibration.h.
#include "quant/calibration.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>

#include "io/error.h"

namespace rqat::quant {

namespace {

// Uniform integer in [0, n) by rejection: std::uniform_int_distribution is implementation-defined,
// so it would tie the recorded samples to one standard library.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const uint64_t excess = (max % n + 1) % n;  // 2^64 mod n values would bias the low residues
  uint64_t x;
  do {
    x = rng();
  } while (x > max - excess);
  return x % n;
}

void validate(const CalibrationOptions& options) {
  if (options.num_samples < 1)
    fail("calibration: num_samples must be >= 1, got {}", options.num_samples);
  if (options.seq_len < 2) fail("calibration: seq_len must be >= 2, got {}", options.seq_len);
  if (options.max_positions && *options.max_positions < 2)
    fail("calibration: the model's max_position_embeddings {} is too small",
         *options.max_positions);
}

// Segments covering stream positions [begin, begin + length) of the documents laid end to end.
std::vector<CalibrationSegment> stream_segments(const data::TokenizedDataset& data,
                                                const std::vector<int64_t>& doc_start,
                                                int64_t begin, int64_t length) {
  std::vector<CalibrationSegment> segments;
  // The last document starting at or before `begin` (empty documents share a start; skip them).
  auto it = std::upper_bound(doc_start.begin(), doc_start.end(), begin);
  size_t d = static_cast<size_t>(it - doc_start.begin()) - 1;
  int64_t pos = begin;
  const int64_t end = begin + length;
  while (pos < end) {
    const auto& doc = data.documents[d];
    const int64_t doc_len = static_cast<int64_t>(doc.tokens.size());
    const int64_t offset = pos - doc_start[d];
    if (offset < doc_len) {
      const int64_t take = std::min(doc_len - offset, end - pos);
      segments.push_back(
          {static_cast<int64_t>(doc.index), static_cast<int64_t>(doc.line), offset, take});
      pos += take;
    }
    ++d;
  }
  return segments;
}

io::Json record_of(const CalibrationOptions& options, const CalibrationSet& set,
                   const data::TokenizedDataset& data) {
  const auto& d = options.data;
  io::Json fields = io::Json::object();
  if (d.use_chat_template) {
    fields["prompt"] = d.prompt_field;
    fields["response"] = d.response_field;
  } else if (data.format == data::DataFormat::kJsonl) {
    fields["text"] = d.text_field;
  }
  io::Json r = io::Json::object();
  r["source"] = d.path.string();
  r["format"] = enum_name(data.format);
  if (data.format == data::DataFormat::kPlainText) {
    r["split"] = enum_name(d.split);
    if (d.split == data::PlainTextSplit::kSeparatorLine) r["separator_line"] = d.separator_line;
  }
  r["fields"] = fields;
  r["chat_template"] = d.use_chat_template ? io::Json(data.chat_format) : io::Json(nullptr);
  if (d.use_chat_template) {
    r["system_prompt"] = d.system_prompt;
    r["enable_thinking"] = d.enable_thinking;
  } else {
    r["add_special_tokens"] = d.add_special_tokens;
  }
  r["append_eos"] = d.append_eos;
  if (d.max_documents) r["max_documents"] = *d.max_documents;
  r["num_samples"] = options.num_samples;
  r["seq_len"] = set.seq_len;
  r["seq_len_requested"] = set.seq_len_requested;
  r["seed"] = options.seed;
  r["rng"] = "mt19937_64";
  r["sampling"] = set.sampling;
  r["documents"] = set.documents;
  r["source_tokens"] = set.source_tokens;
  r["fingerprint"] = token_fingerprint(set.input_ids);
  io::Json samples = io::Json::array();
  for (const auto& sample : set.samples) {
    io::Json segments = io::Json::array();
    for (const auto& s : sample) {
      segments.push_back({{"document", s.document},
                          {"line", s.line},
                          {"token_offset", s.token_offset},
                          {"length", s.length}});
    }
    samples.push_back(std::move(segments));
  }
  r["samples"] = std::move(samples);
  return r;
}

}  // namespace

std::string token_fingerprint(const at::Tensor& input_ids) {
  const at::Tensor ids = input_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = ids.data_ptr<int64_t>();
  uint64_t hash = 14695981039346656037ull;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const auto v = static_cast<uint64_t>(p[i]);
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (v >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return fmt::format("fnv1a64:{:016x}", hash);
}

CalibrationSet build_calibration_set(const CalibrationOptions& options,
                                     const tokenizer::Tokenizer& tokenizer,
                                     const chat::ChatTemplate* chat) {
  validate(options);
  CalibrationSet set;
  set.seq_len_requested = options.seq_len;
  set.seq_len =
      options.max_positions ? std::min(options.seq_len, *options.max_positions) : options.seq_len;
  const int64_t n = options.num_samples, len = set.seq_len;

  const data::TokenizedDataset data = data::load_tokenized_dataset(options.data, tokenizer, chat);
  set.documents = static_cast<int64_t>(data.documents.size());
  set.source_tokens = data.total_tokens;
  const std::string file = options.data.path.string();
  if (data.total_tokens < n * len)
    fail(
        "{}: not enough calibration data: {} documents hold {} tokens, {} samples x {} tokens "
        "need {}",
        file, set.documents, data.total_tokens, n, len, n * len);

  // Every distinct window of every long-enough document, laid end to end.
  std::vector<size_t> long_docs;
  std::vector<int64_t> window_start;  // cumulative count of windows before each long document
  int64_t long_tokens = 0, windows = 0;
  for (size_t i = 0; i < data.documents.size(); ++i) {
    const auto size = static_cast<int64_t>(data.documents[i].tokens.size());
    if (size < len) continue;
    long_docs.push_back(i);
    window_start.push_back(windows);
    windows += size - len + 1;
    long_tokens += size;
  }

  std::mt19937_64 rng(options.seed);
  set.input_ids = torch::empty({n, len}, torch::kLong);
  auto ids = set.input_ids.accessor<int64_t, 2>();
  if (long_tokens >= n * len) {
    set.sampling = "windows";
    std::set<int64_t> used;  // distinct windows: no sample is drawn twice
    for (int64_t row = 0; row < n; ++row) {
      int64_t k;
      do {
        k = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(windows)));
      } while (!used.insert(k).second);
      const size_t j = static_cast<size_t>(
          std::upper_bound(window_start.begin(), window_start.end(), k) - window_start.begin() - 1);
      const auto& doc = data.documents[long_docs[j]];
      const int64_t offset = k - window_start[j];
      for (int64_t t = 0; t < len; ++t) ids[row][t] = doc.tokens[offset + t];
      set.samples.push_back(
          {{static_cast<int64_t>(doc.index), static_cast<int64_t>(doc.line), offset, len}});
    }
  } else {
    set.sampling = "chunks";
    std::vector<int64_t> doc_start;
    std::vector<tokenizer::TokenId> stream;
    stream.reserve(static_cast<size_t>(data.total_tokens));
    for (const auto& doc : data.documents) {
      doc_start.push_back(static_cast<int64_t>(stream.size()));
      stream.insert(stream.end(), doc.tokens.begin(), doc.tokens.end());
    }
    const int64_t chunks = static_cast<int64_t>(stream.size()) / len;  // >= n, checked above
    // Partial Fisher-Yates: the first n entries become n distinct chunks in drawn order.
    std::vector<int64_t> order(static_cast<size_t>(chunks));
    for (int64_t c = 0; c < chunks; ++c) order[c] = c;
    for (int64_t row = 0; row < n; ++row) {
      const int64_t pick =
          row + static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(chunks - row)));
      std::swap(order[row], order[pick]);
      const int64_t begin = order[row] * len;
      for (int64_t t = 0; t < len; ++t) ids[row][t] = stream[begin + t];
      set.samples.push_back(stream_segments(data, doc_start, begin, len));
    }
  }
  set.record = record_of(options, set, data);
  return set;
}

}  // namespace rqat::quant

// Token NLL of a CausalLM against a plain reference written here: each row run alone (no padding,
// no batching), -log_softmax(logits[t-1])[token t] summed in double over the scored positions.
// Also the differentiable masked sum, the scoring windows (every target scored once, context cut
// at the window start) and `rqat nll` end to end on a saved random model with a byte tokenizer.
#include "catch.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <sstream>

#include "io/error.h"
#include "io/json_file.h"
#include "model/init.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tools/nll_command.h"
#include "train/token_nll.h"

namespace {

using nlohmann::json;
using rqat::model::CausalLM;
using rqat::model::Family;
using rqat::test::random_tiny_model;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using namespace rqat::train;
using namespace rqat::data;
using rqat::tools::NllCommandOptions;
using rqat::tools::run_nll_command;

// Sum and count of -log p(tokens[t] | tokens[context_start(t)..t)) over scored t >= 1, running
// the model once per target on exactly that context.
struct Reference {
  double sum = 0;
  int64_t count = 0;
};
template <class ContextStart>
Reference reference_nll(CausalLM& model, const std::vector<int64_t>& tokens,
                        const std::vector<uint8_t>& mask, ContextStart context_start) {
  torch::NoGradGuard no_grad;
  Reference ref;
  for (size_t t = 1; t < tokens.size(); ++t) {
    if (!mask[t]) continue;
    const size_t start = context_start(t);
    const auto context = torch::tensor(
        std::vector<int64_t>(tokens.begin() + start, tokens.begin() + t), torch::kLong);
    const auto logits = model.forward(context.unsqueeze(0))[0][t - start - 1];
    const auto log_probs = logits.to(torch::kDouble).log_softmax(-1);
    ref.sum -= log_probs[tokens[t]].item<double>();
    ++ref.count;
  }
  return ref;
}

Reference reference_nll(CausalLM& model, const std::vector<int64_t>& tokens,
                        const std::vector<uint8_t>& mask) {
  return reference_nll(model, tokens, mask, [](size_t) { return size_t{0}; });
}

struct RandomRows {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::vector<uint8_t>> masks;
};

RandomRows random_rows(int64_t vocab, const std::vector<int64_t>& lengths, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  RandomRows rows;
  for (const int64_t len : lengths) {
    const auto ids = at::randint(0, vocab, {len}, gen, torch::kLong);
    const auto keep = at::rand({len}, gen) < 0.7;
    rows.tokens.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len);
    std::vector<uint8_t> mask(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) mask[i] = keep[i].item<bool>() ? 1 : 0;
    rows.masks.push_back(mask);
  }
  return rows;
}

}  // namespace

TEST_CASE("token_nll of padded batches equals the per-row reference") {
  for (const auto family : {Family::kQwen3, Family::kLlama, Family::kQwen2}) {
    auto model = random_tiny_model(family, /*tied=*/family == Family::kQwen3, 21);
    const int64_t vocab = model->config().vocab_size;
    const auto rows = random_rows(vocab, {17, 5, 1, 12, 23}, 31 + static_cast<int>(family));

    Reference ref;
    for (size_t r = 0; r < rows.tokens.size(); ++r) {
      const auto one = reference_nll(*model, rows.tokens[r], rows.masks[r]);
      ref.sum += one.sum;
      ref.count += one.count;
    }
    REQUIRE(ref.count > 20);

    // Windows API: right padding to the longest row of each batch of 2.
    std::vector<TokenWindow> windows;
    for (size_t r = 0; r < rows.tokens.size(); ++r) {
      TokenWindow w;
      w.tokens.assign(rows.tokens[r].begin(), rows.tokens[r].end());
      w.loss_mask = rows.masks[r];
      windows.push_back(w);
    }
    for (const int64_t batch : {1, 2, 5}) {
      const auto got = token_nll(*model, windows, batch);
      INFO("family " << static_cast<int>(family) << " batch " << batch);
      CHECK(got.tokens == ref.count);
      CHECK(got.sum_nll == Approx(ref.sum).epsilon(1e-5));
      CHECK(got.mean() == Approx(ref.sum / ref.count).epsilon(1e-5));
      CHECK(got.perplexity() == Approx(std::exp(ref.sum / ref.count)).epsilon(1e-5));
    }
    // The random model is far from uniform but not absurd: the mean sits near log(vocab).
    CHECK(std::abs(ref.sum / ref.count - std::log(static_cast<double>(vocab))) < 3.0);
  }
}

TEST_CASE("masked_next_token_nll: reference sum, gradient, and no NaN from unscored -inf") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t b = 3, t = 7, v = 11;
  auto logits = at::randn({b, t, v}, gen).mul_(2).requires_grad_(true);
  const auto ids = at::randint(0, v, {b, t}, gen, torch::kLong);
  auto mask = at::rand({b, t}, gen) < 0.6;
  mask[0][1] = true;

  double ref = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 1; j < t; ++j) {
      if (!mask[i][j].item<bool>()) continue;
      const auto row = logits[i][j - 1].detach().to(torch::kDouble);
      const double lse = std::log(row.exp().sum().item<double>());
      ref += lse - row[ids[i][j].item<int64_t>()].item<double>();
      ++count;
    }
  }
  const auto got = masked_next_token_nll(logits, ids, mask);
  CHECK(got.tokens == count);
  CHECK(got.sum.item<double>() == Approx(ref).epsilon(1e-5));
  got.sum.backward();
  // d/dlogits of -log_softmax at a scored position: softmax - onehot; unscored rows get zero.
  const auto expected_grad = logits.detach().softmax(-1) -
                             at::one_hot(ids, v).to(torch::kFloat).roll(-1, 1);  // target t+1 at t
  CHECK(logits.grad()[0][0].allclose(expected_grad[0][0], 1e-5, 1e-6));  // mask[0][1] is set
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 1; j < t; ++j) {
      if (!mask[i][j].item<bool>()) CHECK(logits.grad()[i][j - 1].abs().max().item<float>() == 0);
    }
  }
  CHECK(logits.grad()[0][t - 1].abs().max().item<float>() ==
        0);  // the last position predicts nothing

  // A -inf logit of the target at an unscored position must not poison the sum.
  auto hard = logits.detach().clone();
  int64_t i0 = -1, j0 = -1;
  for (int64_t i = 0; i < b && i0 < 0; ++i)
    for (int64_t j = 1; j < t && i0 < 0; ++j)
      if (!mask[i][j].item<bool>()) i0 = i, j0 = j;
  REQUIRE(i0 >= 0);
  hard[i0][j0 - 1][ids[i0][j0].item<int64_t>()] = -std::numeric_limits<float>::infinity();
  CHECK(masked_next_token_nll(hard, ids, mask).sum.item<double>() == Approx(ref).epsilon(1e-5));
}

TEST_CASE("token_nll tensor API: batches, errors") {
  auto model = random_tiny_model(Family::kLlama, false, 3);
  const auto rows = random_rows(model->config().vocab_size, {9, 9, 9, 9}, 8);
  std::vector<int64_t> flat;
  std::vector<uint8_t> flat_mask;
  Reference ref;
  for (size_t r = 0; r < 4; ++r) {
    flat.insert(flat.end(), rows.tokens[r].begin(), rows.tokens[r].end());
    flat_mask.insert(flat_mask.end(), rows.masks[r].begin(), rows.masks[r].end());
    const auto one = reference_nll(*model, rows.tokens[r], rows.masks[r]);
    ref.sum += one.sum;
    ref.count += one.count;
  }
  const auto ids = torch::tensor(flat, torch::kLong).view({4, 9});
  const auto mask =
      torch::tensor(std::vector<int64_t>(flat_mask.begin(), flat_mask.end())).view({4, 9});
  for (const int64_t batch : {1, 3, 8}) {
    const auto got = token_nll(*model, ids, mask, batch);
    CHECK(got.tokens == ref.count);
    CHECK(got.sum_nll == Approx(ref.sum).epsilon(1e-5));
  }
  require_error([&] { token_nll(*model, ids + model->config().vocab_size, mask); },
                {"outside the model's vocabulary"});
  require_error([&] { token_nll(*model, ids, mask.slice(1, 0, 8)); }, {"loss_mask"});
  require_error([&] { token_nll(*model, ids, mask, 0); }, {"batch size"});
}

TEST_CASE("score_windows: every target after a document's first token scored exactly once") {
  TokenizedDataset data;
  for (const int n : {1, 2, 10, 23, 7}) {
    TokenizedDocument doc;
    doc.index = data.documents.size();
    for (int i = 0; i < n; ++i) {
      doc.tokens.push_back(static_cast<int>(100 * doc.index + i));
      doc.loss_mask.push_back(i % 4 != 3);
    }
    data.documents.push_back(doc);
  }
  const int64_t seq_len = 6;
  const auto windows = score_windows(data, seq_len);
  std::multiset<int> scored;
  for (const auto& w : windows) {
    CHECK(w.tokens.size() <= static_cast<size_t>(seq_len));
    CHECK(w.tokens.size() >= 2);
    for (size_t t = 1; t < w.tokens.size(); ++t)
      if (w.loss_mask[t]) scored.insert(w.tokens[t]);
  }
  std::multiset<int> expected;
  for (const auto& doc : data.documents)
    for (size_t t = 1; t < doc.tokens.size(); ++t)
      if (doc.loss_mask[t]) expected.insert(doc.tokens[t]);
  CHECK(scored == expected);
  // Document 3 (23 tokens): windows start at 0, 5, 10, 15, 20.
  std::vector<int> starts;
  for (const auto& w : windows)
    if (w.document == 3) starts.push_back(w.tokens[0] - 300);
  CHECK(starts == std::vector<int>{0, 5, 10, 15, 20});

  // A token budget stops in file order, cutting the last window short.
  const auto limited = score_windows(data, seq_len, 9);
  int64_t covered = 0;
  for (const auto& w : limited)
    for (size_t t = 1; t < w.tokens.size(); ++t) covered += w.loss_mask[t];
  CHECK(covered == 9);
  CHECK(limited.back().document == 3);
  require_error([&] { score_windows(data, 1); }, {"window length"});
}

TEST_CASE("run_nll_command on a saved model: numbers equal the windowed reference") {
  TempDir dir("nll_command");
  // A tiny llama with room for a byte-level vocabulary (256 bytes + <|endoftext|>).
  auto config_json = rqat::test::tiny_config(Family::kLlama, false).to_json();
  config_json["vocab_size"] = 260;
  const auto config = rqat::model::ModelConfig::from_json(config_json, "test");
  CausalLM model(config, at::TensorOptions(at::kFloat));
  rqat::model::init_random(model, 17, 0.2);
  rqat::model::save_causal_lm(model, dir / "model");

  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    rqat::tokenizer::byte_level::append_mapped(std::string(1, static_cast<char>(b)), symbol);
    vocab[symbol] = b;
  }
  vocab["<|endoftext|>"] = 256;
  const json tok = {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 256},
                                     {"content", "<|endoftext|>"},
                                     {"special", true},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"single_word", false},
                                     {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  write_bytes(dir / "model" / "tokenizer.json", tok.dump());

  const std::vector<std::string> texts = {"The cat sat on the mat.", "x", "Dogs bark; cats meow.",
                                          "A"};
  write_bytes(dir / "d.jsonl", json({{"body", texts[0]}}).dump() + "\n" +
                                   json({{"body", texts[1]}}).dump() + "\n" +
                                   json({{"body", texts[2]}}).dump() + "\n" +
                                   json({{"body", texts[3]}}).dump() + "\n");

  NllCommandOptions options;
  options.model_dir = dir / "model";
  options.data.path = dir / "d.jsonl";
  options.data.text_field = "body";
  options.seq_len = 8;
  options.batch_size = 3;
  options.json_out = dir / "nll.json";
  std::ostringstream out;
  const auto report = run_nll_command(options, out);

  // Reference: target t of a document sees the tokens from its window start (t-1)/(L-1)*(L-1).
  auto loaded = rqat::quant::load_model(dir / "model");
  Reference ref;
  for (const auto& text : texts) {
    std::vector<int64_t> ids;
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    const auto one = reference_nll(*loaded, ids, std::vector<uint8_t>(ids.size(), 1),
                                   [](size_t t) { return (t - 1) / 7 * 7; });
    ref.sum += one.sum;
    ref.count += one.count;
  }
  CHECK(report.totals.tokens == ref.count);
  CHECK(ref.count == 22 + 0 + 20 + 0);
  CHECK(report.totals.mean() == Approx(ref.sum / ref.count).epsilon(1e-5));
  CHECK(report.documents == 4);
  CHECK(report.windows == 4 + 3);  // 23 tokens: starts 0, 7, 14, 21; 21 tokens: 0, 7, 14

  const auto written = rqat::io::read_json_file(dir / "nll.json");
  CHECK(written["tokens"] == ref.count);
  CHECK(written["mean_nll"].get<double>() == Approx(ref.sum / ref.count).epsilon(1e-5));
  CHECK(written["perplexity"].get<double>() == Approx(std::exp(ref.sum / ref.count)).epsilon(1e-5));
  CHECK(written["fields"]["text"] == "body");
  CHECK(out.str().find("perplexity") != std::string::npos);

  options.max_tokens = 10;
  CHECK(run_nll_command(options, out).totals.tokens == 10);
  options.max_tokens.reset();
  options.seq_len = 1000;
  require_error([&] { run_nll_command(options, out); },
                {"--seq-len 1000", "max_position_embeddings"});
  options.seq_len = 8;
  write_bytes(dir / "d.jsonl", json({{"body", "A"}}).dump() + "\n");
  require_error([&] { run_nll_command(options, out); }, {"d.jsonl", "no tokens to score"});
}

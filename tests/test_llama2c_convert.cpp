// llama2.c -> Hugging Face conversion (`rqat convert --llama2c`): converted models must compute
// what llama2.c's run.c computes (a plain-loop transcription of its forward pass with interleaved
// RoPE, written here), the converted tokenizer must encode as run.c's encoder does (score-ordered
// merges, byte fallback; also transcribed here), damaged files give one-line errors naming the
// file, and the SentencePiece pieces added to rqat's tokenizer (Prepend/Replace normalizers,
// Metaspace, Replace/ByteFallback/Fuse/Strip/Metaspace decoders) behave as Hugging Face
// `tokenizers` does. With ../shared/data: stories260K converts, reproduces run.c's logits, and
// greedy generation from BOS gives karpathy's documented story.
#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "generation/generation_engine.h"
#include "io/error.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "test_util.h"
#include "tokenizer/llama2c_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tools/llama2c_convert.h"

namespace fs = std::filesystem;
using rqat::test::read_bytes;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using rqat::tokenizer::TokenId;
using rqat::tokenizer::Tokenizer;
using rqat::tools::Llama2cHeader;

namespace {

const char* const kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high";

// ------------------------------------------------------------------ llama2.c checkpoints

// The arrays of a llama2.c model, each (out, in) row-major and stacked over layers, as run.c sees
// them.
struct Weights {
  Llama2cHeader h;
  std::vector<float> embed, att_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, final_norm, cls;
  const std::vector<float>& classifier() const { return h.shared_classifier ? embed : cls; }
};

Weights random_weights(const Llama2cHeader& h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto fill = [&](int64_t n, float mean) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = mean + normal(rng);
    return v;
  };
  const int64_t L = h.n_layers, d = h.dim, kv = h.kv_dim(), hid = h.hidden_dim;
  Weights w;
  w.h = h;
  w.embed = fill(h.vocab_size * d, 0);
  w.att_norm = fill(L * d, 1);
  w.wq = fill(L * d * d, 0);
  w.wk = fill(L * kv * d, 0);
  w.wv = fill(L * kv * d, 0);
  w.wo = fill(L * d * d, 0);
  w.ffn_norm = fill(L * d, 1);
  w.w1 = fill(L * hid * d, 0);
  w.w2 = fill(L * d * hid, 0);
  w.w3 = fill(L * hid * d, 0);
  w.final_norm = fill(d, 1);
  if (!h.shared_classifier) w.cls = fill(h.vocab_size * d, 0);
  return w;
}

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
void put(std::string& out, const std::vector<float>& v) {
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string v0_bytes(const Weights& w) {
  const Llama2cHeader& h = w.h;
  std::string out;
  for (int64_t v : {h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads,
                    h.shared_classifier ? h.vocab_size : -h.vocab_size, h.seq_len})
    put(out, static_cast<int32_t>(v));
  for (const auto* a : {&w.embed, &w.att_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w1,
                        &w.w2, &w.w3, &w.final_norm})
    put(out, *a);
  // The RoPE tables of the legacy export (cos, then sin), which run.c skips.
  for (int table = 0; table < 2; ++table) {
    for (int64_t pos = 0; pos < h.seq_len; ++pos) {
      for (int64_t i = 0; i < h.head_size() / 2; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * i / h.head_size());
        put(out, static_cast<float>(table == 0 ? std::cos(angle) : std::sin(angle)));
      }
    }
  }
  if (!h.shared_classifier) put(out, w.cls);
  return out;
}

std::string v1_bytes(const Weights& w) {
  const Llama2cHeader& h = w.h;
  std::string out;
  put(out, static_cast<uint32_t>(0x616b3432));
  put(out, static_cast<int32_t>(1));
  for (int64_t v :
       {h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size, h.seq_len})
    put(out, static_cast<int32_t>(v));
  put(out, static_cast<uint8_t>(h.shared_classifier ? 1 : 0));
  out.resize(256, '\0');
  for (const auto* a : {&w.att_norm, &w.ffn_norm, &w.final_norm, &w.embed, &w.wq, &w.wk, &w.wv,
                        &w.wo, &w.w1, &w.w2, &w.w3})
    put(out, *a);
  if (!h.shared_classifier) put(out, w.cls);
  return out;
}

// Reads a v0 file the way run.c maps it (header, then arrays in order).
Weights read_v0(const fs::path& path) {
  const std::string bytes = read_bytes(path);
  int32_t header[7];
  std::memcpy(header, bytes.data(), sizeof(header));
  Weights w;
  Llama2cHeader& h = w.h;
  h.dim = header[0];
  h.hidden_dim = header[1];
  h.n_layers = header[2];
  h.n_heads = header[3];
  h.n_kv_heads = header[4];
  h.shared_classifier = header[5] > 0;
  h.vocab_size = std::abs(header[5]);
  h.seq_len = header[6];
  size_t pos = sizeof(header);
  auto take = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    std::memcpy(v.data(), bytes.data() + pos, v.size() * sizeof(float));
    pos += v.size() * sizeof(float);
    return v;
  };
  const int64_t L = h.n_layers, d = h.dim, kv = h.kv_dim(), hid = h.hidden_dim;
  w.embed = take(h.vocab_size * d);
  w.att_norm = take(L * d);
  w.wq = take(L * d * d);
  w.wk = take(L * kv * d);
  w.wv = take(L * kv * d);
  w.wo = take(L * d * d);
  w.ffn_norm = take(L * d);
  w.w1 = take(L * hid * d);
  w.w2 = take(L * d * hid);
  w.w3 = take(L * hid * d);
  w.final_norm = take(d);
  take(h.seq_len * h.head_size());
  if (!h.shared_classifier) w.cls = take(h.vocab_size * d);
  return w;
}

// run.c's forward pass, token by token with a KV cache, in double: logits of every position.
std::vector<std::vector<double>> run_c_logits(const Weights& w, const std::vector<int>& tokens) {
  const Llama2cHeader& h = w.h;
  const int64_t d = h.dim, hs = h.head_size(), kv = h.kv_dim(), hid = h.hidden_dim;
  const int64_t kv_mul = h.n_heads / h.n_kv_heads;
  auto matvec = [](const float* m, const std::vector<double>& x, int64_t rows) {
    std::vector<double> out(static_cast<size_t>(rows), 0.0);
    const int64_t cols = static_cast<int64_t>(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r] += m[r * cols + c] * x[c];
    return out;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const float* weight) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (scale * x[i]);
    return out;
  };
  std::vector<std::vector<std::vector<double>>> keys(h.n_layers), values(h.n_layers);
  std::vector<std::vector<double>> all_logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<double> x(w.embed.begin() + tokens[pos] * d,
                          w.embed.begin() + (tokens[pos] + 1) * d);
    for (int64_t l = 0; l < h.n_layers; ++l) {
      std::vector<double> xb = rmsnorm(x, &w.att_norm[l * d]);
      std::vector<double> q = matvec(&w.wq[l * d * d], xb, d);
      std::vector<double> k = matvec(&w.wk[l * kv * d], xb, kv);
      std::vector<double> v = matvec(&w.wv[l * kv * d], xb, kv);
      // RoPE on the interleaved pairs (i, i+1) of q (and of k where i < kv_dim).
      for (int64_t i = 0; i < d; i += 2) {
        const double freq = 1.0 / std::pow(10000.0, static_cast<double>(i % hs) / hs);
        const double c = std::cos(pos * freq), s = std::sin(pos * freq);
        for (std::vector<double>* vec : {&q, &k}) {
          if (vec == &k && i >= kv) continue;
          const double v0 = (*vec)[i], v1 = (*vec)[i + 1];
          (*vec)[i] = v0 * c - v1 * s;
          (*vec)[i + 1] = v0 * s + v1 * c;
        }
      }
      keys[l].push_back(k);
      values[l].push_back(v);
      std::vector<double> att_out(static_cast<size_t>(d), 0.0);
      for (int64_t head = 0; head < h.n_heads; ++head) {
        const int64_t kv_off = (head / kv_mul) * hs;
        std::vector<double> scores(pos + 1);
        double max_score = -1e300;
        for (size_t t = 0; t <= pos; ++t) {
          double dot = 0;
          for (int64_t i = 0; i < hs; ++i) dot += q[head * hs + i] * keys[l][t][kv_off + i];
          scores[t] = dot / std::sqrt(static_cast<double>(hs));
          max_score = std::max(max_score, scores[t]);
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - max_score));
        for (size_t t = 0; t <= pos; ++t)
          for (int64_t i = 0; i < hs; ++i)
            att_out[head * hs + i] += scores[t] / total * values[l][t][kv_off + i];
      }
      const std::vector<double> o = matvec(&w.wo[l * d * d], att_out, d);
      for (int64_t i = 0; i < d; ++i) x[i] += o[i];
      xb = rmsnorm(x, &w.ffn_norm[l * d]);
      std::vector<double> h1 = matvec(&w.w1[l * hid * d], xb, hid);
      const std::vector<double> h3 = matvec(&w.w3[l * hid * d], xb, hid);
      for (int64_t i = 0; i < hid; ++i) h1[i] = h1[i] / (1.0 + std::exp(-h1[i])) * h3[i];
      const std::vector<double> down = matvec(&w.w2[l * d * hid], h1, d);
      for (int64_t i = 0; i < d; ++i) x[i] += down[i];
    }
    all_logits.push_back(
        matvec(w.classifier().data(), rmsnorm(x, w.final_norm.data()), h.vocab_size));
  }
  return all_logits;
}

// rqat's logits of the converted model, compared with run.c's; returns the largest difference.
double max_logit_diff(const fs::path& model_dir, const Weights& w, const std::vector<int>& tokens) {
  auto model = rqat::quant::load_model(model_dir);
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::NoGradGuard no_grad;
  const at::Tensor logits =
      model->forward(at::tensor(ids, at::kLong).unsqueeze(0)).squeeze(0).to(at::kDouble);
  const auto reference = run_c_logits(w, tokens);
  REQUIRE(logits.size(0) == static_cast<int64_t>(tokens.size()));
  REQUIRE(logits.size(1) == w.h.vocab_size);
  double worst = 0;
  auto acc = logits.accessor<double, 2>();
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t v = 0; v < w.h.vocab_size; ++v)
      worst = std::max(worst, std::abs(acc[t][v] - reference[t][v]));
  return worst;
}

Llama2cHeader tiny_header(bool shared) {
  Llama2cHeader h;
  h.dim = 24;  // 4 heads of 6: three rotary pairs, so interleaved != halves
  h.hidden_dim = 40;
  h.n_layers = 2;
  h.n_heads = 4;
  h.n_kv_heads = 2;
  h.vocab_size = 37;
  h.seq_len = 32;
  h.shared_classifier = shared;
  return h;
}

rqat::tools::Llama2cConvertOptions convert_options(const fs::path& checkpoint,
                                                   const fs::path& out) {
  rqat::tools::Llama2cConvertOptions o;
  o.checkpoint = checkpoint;
  o.out_dir = out;
  return o;
}

// ------------------------------------------------------------------ llama2.c tokenizers

struct Vocab {
  std::vector<std::string> pieces;  // as llama2.c stores them (spaces, "\n<s>\n")
  std::vector<float> scores;
};

std::string tokenizer_bin(const Vocab& v) {
  std::string out;
  size_t longest = 0;
  for (const auto& p : v.pieces) longest = std::max(longest, p.size());
  put(out, static_cast<int32_t>(longest));
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    put(out, v.scores[i]);
    put(out, static_cast<int32_t>(v.pieces[i].size()));
    out += v.pieces[i];
  }
  return out;
}

Vocab parse_tokenizer_bin(const std::string& bytes) {
  Vocab v;
  size_t pos = 4;
  while (pos < bytes.size()) {
    float score = 0;
    int32_t len = 0;
    std::memcpy(&score, bytes.data() + pos, 4);
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    v.pieces.push_back(bytes.substr(pos + 8, static_cast<size_t>(len)));
    v.scores.push_back(score);
    pos += 8 + static_cast<size_t>(len);
  }
  return v;
}

// run.c's encode() without BOS/EOS: a dummy " " in front of non-empty text, one token per UTF-8
// character (else its bytes as tokens id = byte + 3), then repeatedly merge the adjacent pair whose
// concatenation is the piece with the highest score (leftmost on ties).
std::vector<TokenId> run_c_encode(const Vocab& v, const std::string& text) {
  auto lookup = [&](const std::string& s) -> int {
    for (size_t i = 0; i < v.pieces.size(); ++i)
      if (v.pieces[i] == s) return static_cast<int>(i);
    return -1;
  };
  std::vector<TokenId> tokens;
  if (!text.empty()) tokens.push_back(lookup(" "));
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (i + n < text.size() && n < 4 && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80)
      ++n;
    const std::string c = text.substr(i, n);
    if (const int id = lookup(c); id >= 0) {
      tokens.push_back(id);
    } else {
      for (const char b : c) tokens.push_back(static_cast<unsigned char>(b) + 3);
    }
    i += n;
  }
  while (true) {
    float best = -1e10f;
    int best_id = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int id = lookup(v.pieces[tokens[i]] + v.pieces[tokens[i + 1]]);
      if (id >= 0 && v.scores[id] > best) {
        best = v.scores[id];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_at] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return tokens;
}

// A small SentencePiece-like vocabulary: specials, 256 byte tokens, merged pieces by score, then
// single characters (lowest scores), as SentencePiece BPE orders them.
Vocab tiny_vocab() {
  Vocab v;
  v.pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.pieces.emplace_back(name);
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  const std::vector<std::string> normal = {"ab",  " a", " ab", "ca", "abc", "bb",      " c",
                                           "cab", " ",  "a",   "b",  "c",   "\xC3\xA9" /* é */};
  for (size_t i = 0; i < normal.size(); ++i) {
    v.pieces.push_back(normal[i]);
    v.scores.push_back(-static_cast<float>(i));
  }
  return v;
}

fs::path write_tokenizer_dir(const TempDir& dir, const Vocab& v) {
  const fs::path bin = dir / "tok.bin";
  write_bytes(bin, tokenizer_bin(v));
  const auto files = rqat::tokenizer::llama2c_vocab_to_hf(rqat::tokenizer::read_llama2c_vocab(bin),
                                                          64, bin.string());
  const fs::path out = dir / "tokenizer";
  fs::create_directories(out);
  write_bytes(out / "tokenizer.json", files.tokenizer.dump());
  write_bytes(out / "tokenizer_config.json", files.config.dump());
  return out;
}

std::string stream_decode(const Tokenizer& tok, const std::vector<TokenId>& ids, bool skip) {
  rqat::tokenizer::StreamDecoder stream(tok, skip);
  std::string out;
  for (const TokenId id : ids) out += stream.push(id);
  return out + stream.flush();
}

// A tokenizer.json with a hand-made vocabulary and the given pipeline parts.
fs::path write_pipeline(const TempDir& dir, const std::string& name,
                        const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer,
                        const nlohmann::json& decoder) {
  nlohmann::json vocab = {{"<unk>", 0},
                          {"\xE2\x96\x81", 1},
                          {"a", 2},
                          {"b", 3},
                          {"\xE2\x96\x81"
                           "a",
                           4},
                          {"<0x0A>", 5},
                          {"<0xC3>", 6},
                          {"<0xA9>", 7},
                          {"<s>", 8}};
  nlohmann::json tok = {
      {"added_tokens",
       nlohmann::json::array(
           {{{"id", 8}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", normalizer},
      {"pre_tokenizer", pre_tokenizer},
      {"decoder", decoder},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges", nlohmann::json::array({nlohmann::json::array({"\xE2\x96\x81", "a"})})}}}};
  const fs::path out = dir / name;
  fs::create_directories(out);
  write_bytes(out / "tokenizer.json", tok.dump());
  return out;
}

std::vector<TokenId> ids(std::initializer_list<TokenId> list) { return list; }

}  // namespace

// ------------------------------------------------------------------ model conversion

TEST_CASE("llama2.c v0 and v1 checkpoints convert to a Llama that computes run.c's logits") {
  for (const bool shared : {true, false}) {
    INFO("shared classifier: " << shared);
    TempDir dir("l2c_model");
    const Weights w = random_weights(tiny_header(shared), shared ? 11 : 12);
    write_bytes(dir / "v0.bin", v0_bytes(w));
    write_bytes(dir / "v1.bin", v1_bytes(w));
    rqat::tools::convert_llama2c(convert_options(dir / "v0.bin", dir / "hf0"));
    rqat::tools::convert_llama2c(convert_options(dir / "v1.bin", dir / "hf1"));

    const auto config = rqat::model::ModelConfig::load(dir / "hf0" / "config.json");
    CHECK(config.model_type == "llama");
    CHECK(config.tie_word_embeddings == shared);
    CHECK(config.rms_norm_eps == 1e-5);
    CHECK(config.rope_theta == 10000.0);
    CHECK(config.max_position_embeddings == 32);
    CHECK(config.num_key_value_heads == 2);
    CHECK(config.bos_token_id == 1);
    CHECK(config.eos_token_ids == std::vector<int64_t>{2});

    // Positions past 1 make the rotary layout matter; 1e-4 absolute on logits of size ~10 is what
    // float32 against a double reference allows (a wrong q/k permutation is off by ~1).
    const std::vector<int> tokens = {1, 5, 36, 7, 7, 20, 3, 0, 12, 30, 2};
    CHECK(max_logit_diff(dir / "hf0", w, tokens) < 1e-4);
    CHECK(max_logit_diff(dir / "hf1", w, tokens) < 1e-4);

    // Both versions hold the same weights: the converted tensors are bit-identical.
    const auto a = rqat::tools::read_llama2c_checkpoint(dir / "v0.bin");
    const auto b = rqat::tools::read_llama2c_checkpoint(dir / "v1.bin");
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      CHECK(a.tensors[i].first == b.tensors[i].first);
      CHECK(at::equal(a.tensors[i].second, b.tensors[i].second));
    }
    CHECK(a.header.version == 0);
    CHECK(b.header.version == 1);
  }
}

TEST_CASE("the rotary permutation moves pair (2i, 2i+1) of each head to (i, i + head/2)") {
  // Rows numbered by their index: head h, pair i, member m sits at row h*6 + 2i + m.
  const at::Tensor w = at::arange(12, at::kFloat).unsqueeze(1).repeat({1, 3});
  const at::Tensor p = rqat::tools::interleaved_to_half_rotary(w, 2);
  const std::vector<float> expected = {0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11};
  for (int64_t r = 0; r < 12; ++r) {
    for (int64_t c = 0; c < 3; ++c) CHECK(p[r][c].item<float>() == expected[r]);
  }
}

TEST_CASE("damaged llama2.c checkpoints: one-line errors naming the file") {
  TempDir dir("l2c_errors");
  const Weights w = random_weights(tiny_header(true), 3);
  const std::string good = v0_bytes(w);
  const fs::path file = dir / "model.bin";
  auto expect = [&](const std::string& bytes, std::initializer_list<std::string> needles) {
    write_bytes(file, bytes);
    require_error([&] { rqat::tools::read_llama2c_checkpoint(file); }, needles);
    require_error([&] { rqat::tools::convert_llama2c(convert_options(file, dir / "out")); },
                  needles);
    CHECK_FALSE(fs::exists(dir / "out"));  // nothing written before the input is known good
  };
  expect(good.substr(0, good.size() - 4), {"model.bin", "truncated", "dim 24", "bytes"});
  expect(good + std::string(8, '\0'), {"model.bin", "trailing data"});
  expect(good.substr(0, 20), {"model.bin", "too short"});
  expect("", {"model.bin", "too short"});
  std::string bad = good;
  const int32_t negative = -24;
  std::memcpy(bad.data(), &negative, 4);
  expect(bad, {"model.bin", "dim", "-24"});
  bad = good;
  const int32_t three = 3;
  std::memcpy(bad.data() + 16, &three, 4);  // n_kv_heads 3 does not divide 4 heads
  expect(bad, {"model.bin", "n_kv_heads 3"});
  // Every field within its bound, yet 3 x n_layers x dim x hidden_dim is 3 x 2^60 floats: the
  // count overflowed int64 (undefined behaviour) before it was compared with the file size.
  bad = good;
  const int32_t huge = 1 << 20;
  for (const int offset : {0, 4, 8}) std::memcpy(bad.data() + offset, &huge, 4);
  expect(bad, {"model.bin", "describe more weights than any file holds"});
  std::string v1 = v1_bytes(w);
  const int32_t q8 = 2;
  std::memcpy(v1.data() + 4, &q8, 4);
  expect(v1, {"model.bin", "version 2", "Q8_0"});
  const int32_t unknown = 7;
  std::memcpy(v1.data() + 4, &unknown, 4);
  expect(v1, {"model.bin", "unknown llama2.c checkpoint version 7"});
  require_error([&] { rqat::tools::read_llama2c_checkpoint(dir / "absent.bin"); },
                {"absent.bin", "cannot open"});
}

// ------------------------------------------------------------------ tokenizer conversion

TEST_CASE("a converted llama2.c tokenizer encodes as run.c and decodes back to the text") {
  TempDir dir("l2c_tok");
  const Vocab v = tiny_vocab();
  const auto tok = Tokenizer::load(write_tokenizer_dir(dir, v));
  CHECK(tok->vocab_size() == static_cast<int64_t>(v.pieces.size()));
  CHECK(tok->token_to_id("<s>") == 1);
  CHECK(tok->token_to_id("\xE2\x96\x81"
                         "ab") == 261);  // " ab" stored with a space
  CHECK(tok->is_special(0));
  CHECK(tok->is_special(2));
  CHECK(tok->config().add_bos_token);

  const std::vector<std::string> texts = {"ab",
                                          "ab ab",
                                          "abcab",
                                          "cab cab",
                                          "bbbb",
                                          "a  b",
                                          "c c ca",
                                          "\xC3\xA9"
                                          "a",         // é is a piece
                                          "\xC3\xB1",  // ñ is not: its two bytes
                                          "a\nb\n",    // newline only as a byte token
                                          "x",
                                          "",
                                          "abc abca"};
  for (const std::string& text : texts) {
    INFO("text: '" << text << "'");
    const auto got = tok->encode(text);
    CHECK(got == run_c_encode(v, text));
    CHECK(tok->decode(got) == text);
    CHECK(stream_decode(*tok, got, false) == text);
    auto with_bos = tok->encode(text, true);
    REQUIRE(!with_bos.empty());
    CHECK(with_bos.front() == 1);
    CHECK(std::vector<TokenId>(with_bos.begin() + 1, with_bos.end()) == got);
    CHECK(tok->decode(with_bos, true) == text);
    CHECK(stream_decode(*tok, with_bos, true) == text);
  }
  // Closed forms (ids: 259 "ab", 260 " a", 261 " ab", 265 " c", 267 " "): one "▁" in front,
  // merges by score.
  CHECK(tok->encode("ab ab") == ids({261, 261}));
  // "cab": "ab" (score 0) first, then " c" (-6); "ca" (-3) and "cab" never get their turn.
  CHECK(tok->encode("cab") == ids({265, 259}));
  CHECK(tok->encode("\xC3\xB1") == ids({267, 0xC3 + 3, 0xB1 + 3}));
  // Where Hugging Face's Metaspace ("first") and run.c differ: a text that already starts with a
  // space gets no second one (run.c and SentencePiece add it).
  CHECK(tok->encode(" a") == ids({260}));
  CHECK(run_c_encode(v, " a") == ids({267, 260}));
  CHECK(tok->decode(ids({1, 260})) == "<s> a");  // kept special tokens stay in the text
  CHECK(tok->decode(ids({260, 260})) == "a a");  // only the first word loses its space
}

TEST_CASE("llama2.c tokenizer files: damaged or mismatched ones are refused") {
  TempDir dir("l2c_tok_errors");
  const std::string good = tokenizer_bin(tiny_vocab());
  const fs::path file = dir / "tok.bin";
  auto expect = [&](const std::string& bytes, std::initializer_list<std::string> needles) {
    write_bytes(file, bytes);
    require_error([&] { rqat::tokenizer::read_llama2c_vocab(file); }, needles);
  };
  expect(good.substr(0, good.size() - 1), {"tok.bin", "truncated", "token 271"});
  expect(good.substr(0, good.size() - 6), {"tok.bin", "truncated", "length"});
  expect(good.substr(0, 2), {"tok.bin", "truncated", "max_token_length"});
  std::string bad = good;
  const int32_t zero = 0;
  std::memcpy(bad.data(), &zero, 4);
  expect(bad, {"tok.bin", "max_token_length is 0"});
  Vocab dup = tiny_vocab();
  dup.pieces[260] = "ab";
  write_bytes(file, tokenizer_bin(dup));
  require_error(
      [&] {
        rqat::tokenizer::llama2c_vocab_to_hf(rqat::tokenizer::read_llama2c_vocab(file), 8,
                                             "tok.bin");
      },
      {"tok.bin", "tokens 259 and 260"});
  Vocab invalid = tiny_vocab();
  invalid.pieces[265] = "\xFF";
  write_bytes(file, tokenizer_bin(invalid));
  require_error(
      [&] {
        rqat::tokenizer::llama2c_vocab_to_hf(rqat::tokenizer::read_llama2c_vocab(file), 8,
                                             "tok.bin");
      },
      {"tok.bin", "token 265", "UTF-8"});

  // A vocabulary of another size than the checkpoint's: refused before writing, naming both.
  write_bytes(file, good);
  const Weights w = random_weights(tiny_header(true), 5);  // vocab 37, the tokenizer has 272
  write_bytes(dir / "model.bin", v0_bytes(w));
  auto options = convert_options(dir / "model.bin", dir / "out");
  options.tokenizer_bin = file;
  require_error([&] { rqat::tools::convert_llama2c(options); },
                {"tok.bin", "272 tokens", "model.bin", "vocab_size 37"});
  CHECK_FALSE(fs::exists(dir / "out"));
}

// ------------------------------------------------------------------ SentencePiece pipeline parts

TEST_CASE("SentencePiece pipeline parts of tokenizer.json: Prepend, Replace, Metaspace, decoders") {
  using nlohmann::json;
  TempDir dir("l2c_parts");
  const std::string sp = "\xE2\x96\x81";
  const json sp_decoder = {
      {"type", "Sequence"},
      {"decoders",
       json::array({{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};

  SECTION("legacy Llama normalizer: Prepend + Replace, no pre-tokenizer") {
    const json normalizer = {
        {"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", sp}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}};
    const auto tok =
        Tokenizer::load(write_pipeline(dir, "legacy", normalizer, nullptr, sp_decoder));
    CHECK(tok->encode("a b") == ids({4, 1, 3}));
    CHECK(tok->encode(" a") == ids({1, 4}));  // Prepend does not look at what is there
    // The normalizer runs on each piece between added tokens: a "▁" after <s> as well.
    CHECK(tok->encode("a<s>a") == ids({4, 8, 4}));
    CHECK(tok->encode("") == ids({}));
    CHECK(tok->decode(ids({4, 1, 3})) == "a b");
  }
  SECTION("Replace normalizer with a regex") {
    const json normalizer = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", sp}};
    const auto tok = Tokenizer::load(write_pipeline(dir, "regex", normalizer, nullptr, sp_decoder));
    CHECK(tok->encode("a   a") == ids({2, 4}));
  }
  SECTION("Metaspace pre-tokenizer: prepend schemes and split") {
    auto load = [&](const std::string& name, const json& pre) {
      return Tokenizer::load(write_pipeline(dir, name, nullptr, pre, sp_decoder));
    };
    const auto first = load("first", {{"type", "Metaspace"},
                                      {"replacement", sp},
                                      {"prepend_scheme", "first"},
                                      {"split", false}});
    CHECK(first->encode("a b") == ids({4, 1, 3}));
    CHECK(first->encode("a<s>a") == ids({4, 8, 2}));  // not after an added token
    CHECK(first->encode("<s>a") == ids({8, 2}));
    const auto always = load("always", {{"type", "Metaspace"},
                                        {"replacement", sp},
                                        {"prepend_scheme", "always"},
                                        {"split", true}});
    CHECK(always->encode("a<s>a") == ids({4, 8, 4}));
    CHECK(always->encode("aa a") == ids({4, 2, 4}));  // words "▁aa", "▁a"
    const auto never =
        load("never", {{"type", "Metaspace"}, {"replacement", sp}, {"add_prefix_space", false}});
    CHECK(never->encode("a a") == ids({2, 4}));
    // Split cuts "▁a▁▁a" in front of every "▁": words "▁a", "▁", "▁a".
    CHECK(always->encode("a  a") == ids({4, 1, 4}));
  }
  SECTION("decoders: ByteFallback, Strip, Metaspace, and streaming") {
    const auto tok = Tokenizer::load(write_pipeline(dir, "dec", nullptr, nullptr, sp_decoder));
    // Valid byte runs become their character; invalid ones one U+FFFD per byte token.
    CHECK(tok->decode(ids({6, 7, 4})) == "\xC3\xA9 a");
    CHECK(tok->decode(ids({6, 4})) == "\xEF\xBF\xBD a");
    CHECK(tok->decode(ids({4, 5, 4})) == "a\n a");
    CHECK(tok->decode(ids({1, 1, 2})) == " a");  // Strip removes one leading space only
    CHECK(stream_decode(*tok, ids({4, 6, 7, 4}), false) == "a\xC3\xA9 a");
    CHECK(stream_decode(*tok, ids({8, 4, 4}), true) == "a a");
    CHECK(stream_decode(*tok, ids({8, 4, 4}), false) == "<s> a a");
    CHECK(tok->token_bytes(4, false) == " a");
    CHECK(tok->first_token_bytes(4, false) == "a");

    const json metaspace = {
        {"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}};
    const auto ms = Tokenizer::load(write_pipeline(dir, "ms", nullptr, nullptr, metaspace));
    // tokenizers' Metaspace decoder drops every "▁" of the first token, turns the others to spaces.
    CHECK(ms->decode(ids({4, 4, 1})) == "a a ");
    CHECK(stream_decode(*ms, ids({4, 4, 1}), false) == "a a ");
  }
  SECTION("bad parts name the field") {
    auto expect = [&](const json& normalizer, const json& pre, const json& decoder,
                      std::initializer_list<std::string> needles) {
      const fs::path d = write_pipeline(dir, "bad", normalizer, pre, decoder);
      require_error([&] { Tokenizer::load(d); }, needles);
    };
    expect({{"type", "Prepend"}}, nullptr, nullptr, {"tokenizer.json", "normalizer.prepend"});
    expect({{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}}, nullptr, nullptr,
           {"tokenizer.json", "normalizer.pattern.String", "empty"});
    expect(nullptr, {{"type", "Metaspace"}, {"replacement", "ab"}}, nullptr,
           {"tokenizer.json", "pre_tokenizer.replacement", "one character"});
    expect(nullptr, {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "sometimes"}},
           nullptr, {"tokenizer.json", "pre_tokenizer.prepend_scheme", "sometimes"});
    expect(nullptr, nullptr, {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}},
           {"tokenizer.json", "decoder.start"});
    expect(nullptr, nullptr,
           {{"type", "Sequence"}, {"decoders", json::array({{{"type", "WordPiece"}}})}},
           {"tokenizer.json", "decoder.decoders[0].type", "WordPiece"});
  }
}

// ------------------------------------------------------------------ real trained weights

TEST_CASE("stories260K converts, computes run.c's logits and tells karpathy's greedy story") {
  const fs::path data = rqat::test::shared_data_dir() / "tinyllama";
  if (!fs::exists(data / "stories260K.bin") || !fs::exists(data / "tok512.bin")) {
    std::cout << "SKIPPED: " << data.string() << " (stories260K.bin, tok512.bin) is absent\n";
    return;
  }
  TempDir dir("l2c_stories");
  auto options = convert_options(data / "stories260K.bin", dir / "hf");
  options.tokenizer_bin = data / "tok512.bin";
  rqat::tools::convert_llama2c(options);

  const auto tok = Tokenizer::load(dir / "hf");
  const Vocab vocab = parse_tokenizer_bin(read_bytes(data / "tok512.bin"));
  const auto story_ids = tok->encode(kStory, true);
  REQUIRE(story_ids.front() == 1);
  CHECK(std::vector<TokenId>(story_ids.begin() + 1, story_ids.end()) ==
        run_c_encode(vocab, kStory));

  // Logits on the first 24 tokens of the story against run.c's forward on the raw file.
  const Weights w = read_v0(data / "stories260K.bin");
  const std::vector<int> prefix(story_ids.begin(), story_ids.begin() + 24);
  const double diff = max_logit_diff(dir / "hf", w, prefix);
  std::cout << "stories260K: max |logit - run.c| over 24 positions = " << diff << "\n";
  CHECK(diff < 1e-4);

  // Greedy generation from BOS with the generation engine.
  auto model = rqat::quant::load_model(dir / "hf");
  rqat::generation::GenerationEngine engine(*model, tok);
  rqat::generation::GenerationRequest request;
  request.prompt_ids = {1};
  request.params.temperature = 0;
  request.params.max_new_tokens = static_cast<int64_t>(story_ids.size()) + 16;
  request.params.stop_token_ids = {2};
  const auto results = engine.generate({request});
  REQUIRE(results.size() == 1);
  INFO("generated: " << results[0].text);
  CHECK(results[0].text.starts_with(kStory));

  // The TinyStories sample: run.c's encoding of every line, and back to the line.
  std::ifstream in(data / "tinystories_sample.txt", std::ios::binary);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    INFO("line " << lines << ": " << line);
    const auto got = tok->encode(line);
    CHECK(got == run_c_encode(vocab, line));
    CHECK(tok->decode(got) == line);
    ++lines;
  }
  CHECK(lines == 25);
}

// See test_util.h.
#include "test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include "io/error.h"
#include "model/init.h"
#include "model/model_dir.h"
#include "model/paged_step.h"
#include "tokenizer/byte_level.h"
#include "tools/llama2c_convert.h"

namespace rqat::test {

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("rqat_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

model::ModelConfig tiny_config(model::Family family, bool tied) {
  io::Json j = {
      {"hidden_size", 48},        {"intermediate_size", 80},     {"num_hidden_layers", 2},
      {"num_attention_heads", 6}, {"num_key_value_heads", 2},    {"vocab_size", 97},
      {"rms_norm_eps", 1e-6},     {"tie_word_embeddings", tied}, {"max_position_embeddings", 256}};
  switch (family) {
    case model::Family::kQwen2:
      j["model_type"] = "qwen2";
      j["rope_theta"] = 10000.0;
      break;
    case model::Family::kQwen3:
      j["model_type"] = "qwen3";
      j["head_dim"] = 12;  // 6 * 12 = 72 != 48
      j["rope_theta"] = 1000000.0;
      break;
    case model::Family::kLlama:
      j["model_type"] = "llama";
      j["head_dim"] = 16;
      j["rope_theta"] = 500000.0;
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 32}};
      break;
    case model::Family::kCount:  // not a family
      break;
  }
  return model::ModelConfig::from_json(j, "tiny_config");
}

std::shared_ptr<model::CausalLM> random_tiny_model(model::Family family, bool tied, uint64_t seed) {
  auto model =
      std::make_shared<model::CausalLM>(tiny_config(family, tied), at::TensorOptions(at::kFloat));
  model::init_random(*model, seed, /*std=*/0.2);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 100);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    if (p.key().ends_with("norm.weight")) p.value().add_(at::randn(p.value().sizes(), gen) * 0.1);
    if (p.key().ends_with(".bias")) p.value().copy_(at::randn(p.value().sizes(), gen) * 0.1);
  }
  return model;
}

int cuda_tests_skipped() {
#ifndef RQAT_WITH_CUDA
  std::cout << "SKIPPED: rqat was built without CUDA kernels (no nvcc)\n";
  return 77;
#else
  if (!torch::cuda::is_available()) {
    std::cout
        << "SKIPPED: no CUDA device on this machine; the kernel compiled but cannot run here\n";
    return 77;
  }
  return 0;
#endif
}

std::vector<int32_t> random_tokens(int64_t length, uint64_t seed, int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto t = at::randint(0, vocab, {length}, gen, at::kLong).contiguous();
  const int64_t* data = t.const_data_ptr<int64_t>();
  return std::vector<int32_t>(data, data + length);
}

at::Tensor paged_forward(model::CausalLM& model, model::PagedKVCache& cache,
                         const std::vector<model::PagedSequence*>& seqs,
                         const std::vector<std::span<const int32_t>>& tokens) {
  std::vector<const model::PagedSequence*> view;
  for (size_t i = 0; i < seqs.size(); ++i) {
    REQUIRE(cache.reserve(*seqs[i], seqs[i]->length + static_cast<int64_t>(tokens[i].size())));
    view.push_back(seqs[i]);
  }
  auto logits = model.forward_paged(
      model::make_paged_step(view, tokens, cache.block_size(), model.options().device()), cache);
  for (size_t i = 0; i < seqs.size(); ++i)
    seqs[i]->length += static_cast<int64_t>(tokens[i].size());
  return logits;
}

at::Tensor paged_cached_logits(model::CausalLM& model, const at::Tensor& ids,
                               const at::Tensor& mask, int64_t prompt, int64_t block_size) {
  torch::NoGradGuard no_grad;
  const int64_t batch = ids.size(0), steps = ids.size(1);
  auto real = mask.to(at::kBool);
  auto cache =
      model.make_paged_cache(batch * ((steps + block_size - 1) / block_size) + 1, block_size);
  std::vector<model::PagedSequence> seqs(static_cast<size_t>(batch));
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < steps; ++t)
      if (real[b][t].item<bool>())
        rows[static_cast<size_t>(b)].push_back(static_cast<int32_t>(ids[b][t].item<int64_t>()));
  auto out = at::zeros({batch, steps, model.config().vocab_size});
  // One call over the rows' real prompt tokens, then one per later column.
  auto run = [&](int64_t first_column, int64_t end_column, int64_t logits_column) {
    std::vector<model::PagedSequence*> in_seqs;
    std::vector<std::span<const int32_t>> tokens;
    std::vector<int64_t> in_call;
    for (int64_t b = 0; b < batch; ++b) {
      int64_t begin = 0, n = 0;  // real tokens before first_column, and in [first, end)
      for (int64_t t = 0; t < end_column; ++t) {
        if (!real[b][t].item<bool>()) continue;
        if (t < first_column)
          ++begin;
        else
          ++n;
      }
      if (n == 0) continue;
      in_seqs.push_back(&seqs[static_cast<size_t>(b)]);
      tokens.push_back(std::span<const int32_t>(rows[static_cast<size_t>(b)])
                           .subspan(static_cast<size_t>(begin), static_cast<size_t>(n)));
      in_call.push_back(b);
    }
    if (in_seqs.empty()) return;
    const auto logits = paged_forward(model, cache, in_seqs, tokens);
    for (size_t i = 0; i < in_call.size(); ++i)
      out[in_call[i]][logits_column].copy_(logits[static_cast<int64_t>(i)]);
  };
  run(0, prompt, prompt - 1);
  for (int64_t t = prompt; t < steps; ++t) run(t, t + 1, t);
  return out;
}

std::filesystem::path shared_data_dir() {
  if (const char* env = std::getenv("RQAT_SHARED_DATA"); env != nullptr && *env != '\0') return env;
  return std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "shared" / "data";
}

void require_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO("error message: " << message);
    CHECK(message.find('\n') == std::string::npos);
    for (const auto& needle : needles) CHECK(message.find(needle) != std::string::npos);
    return;
  }
  FAIL("expected an rqat::Error");
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Byte-level BPE without merges (token id = byte value) plus three special tokens and a ChatML
// template, so a text's ids are its bytes and the special tokens are single ids.
std::shared_ptr<const tokenizer::Tokenizer> byte_level_test_tokenizer(const TempDir& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    tokenizer::byte_level::append_mapped(std::string(1, static_cast<char>(b)), symbol);
    vocab[symbol] = b;
  }
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [id, content] : {std::pair{256, "<|endoftext|>"}, std::pair{257, "<|im_start|>"},
                                    std::pair{258, "<|im_end|>"}}) {
    vocab[content] = id;
    added.push_back({{"id", id},
                     {"content", content},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
  }
  const nlohmann::json tok = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  write_bytes(dir / "tokenizer.json", tok.dump());
  const nlohmann::json config = {
      {"eos_token", "<|im_end|>"},
      {"chat_template",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
       "%}{{ '<|im_start|>assistant\\n' }}{% endif %}"}};
  write_bytes(dir / "tokenizer_config.json", config.dump());
  return tokenizer::Tokenizer::load(dir.path());
}

std::optional<std::filesystem::path> convert_stories260k(const TempDir& dir) {
  const auto data = shared_data_dir() / "tinyllama";
  if (!std::filesystem::exists(data / "stories260K.bin") ||
      !std::filesystem::exists(data / "tok512.bin")) {
    std::puts("SKIPPED: ../shared/data/tinyllama is absent");
    return std::nullopt;
  }
  tools::Llama2cConvertOptions convert;
  convert.checkpoint = data / "stories260K.bin";
  convert.tokenizer_bin = data / "tok512.bin";
  convert.out_dir = dir / "model";
  tools::convert_llama2c(convert);
  return convert.out_dir;
}

std::vector<nlohmann::ordered_json> metrics_rows(const std::filesystem::path& run_dir,
                                                 const std::string& series) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<nlohmann::ordered_json> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto row = nlohmann::ordered_json::parse(line);
    if (row["series"] == series) rows.push_back(std::move(row));
  }
  return rows;
}

ops::LowBitWeight random_low_bit_weight(at::Generator& gen, int bits, int64_t out, int64_t in,
                                        int64_t group, bool permuted) {
  const int64_t levels = int64_t{1} << bits, width = group > 0 ? group : in;
  const int64_t groups = (in + width - 1) / width;
  const at::Tensor codes = at::randint(0, levels, {out, in}, gen, at::kInt);
  const at::Tensor scales = at::rand({out, groups}, gen) * 0.1 + 0.01;
  const at::Tensor zeros = at::randint(0, levels, {out, groups}, gen, at::kFloat);
  const at::Tensor order = permuted ? at::randperm(in, gen, at::kLong) : at::Tensor();
  return ops::pack_low_bit(codes, scales, zeros, bits, group, order, "test");
}

std::filesystem::path write_byte_level_model(const TempDir& dir) {
  byte_level_test_tokenizer(dir);
  auto config = tiny_config(model::Family::kQwen3, /*tied=*/false);
  config.vocab_size = 260;
  config.eos_token_ids = {258};
  model::CausalLM model(config, at::TensorOptions(at::kFloat));
  model::init_random(model, 5, 0.1);
  model::SaveOptions save;
  save.tokenizer_from = dir.path();
  model::save_causal_lm(model, dir / "model", save);
  return dir / "model";
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

double relative_to_largest(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want).abs().max() / want.abs().max().clamp_min(1e-30))
      .item<double>();
}

}  // namespace rqat::test

// Parity with Hugging Face transformers: tiny random models written by
// tests/python/make_hf_fixtures.py (qwen2 with GQA ratio 3 and biases, qwen3 with head_dim !=
// hidden/heads and tied embeddings, llama with llama3 rope scaling in shards) give the same logits
// on left-padded batches, and the KV-cache path agrees with them too. Tags select a family:
// test_hf_parity "[qwen3]".
#include <ATen/ATen.h>

#include <cstdlib>
#include <iostream>

#include "io/safetensors.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "test_util.h"

namespace {

// Both sides compute in float32 with different operation orders; observed max |diff| is ~1.5e-6 on
// logits of magnitude ~3, so 1e-4 (the bound) has ample margin yet catches any real bug.
constexpr double kTol = 1e-4;

std::filesystem::path fixture(const std::string& name) {
  const char* root = std::getenv("RQAT_HF_FIXTURES");
  REQUIRE(root != nullptr);
  REQUIRE(std::filesystem::exists(std::filesystem::path(root) / ".complete"));
  return std::filesystem::path(root) / name;
}

void check_case(const std::string& name) {
  const auto dir = fixture(name);
  auto model = rqat::quant::load_model(dir / "model");
  auto ref = rqat::io::SafetensorsFile::open(dir / "reference.safetensors");
  auto ids = ref->tensor("input_ids").to(at::kLong);
  auto mask = ref->tensor("attention_mask").to(at::kLong);
  auto expected = ref->tensor("logits");
  auto real = mask.to(at::kBool);
  torch::NoGradGuard no_grad;

  auto logits = model->forward(ids, mask);
  const double diff = (logits - expected).index({real}).abs().max().item<double>();
  std::cout << name << ": full forward max |logit diff| vs transformers = " << diff << "\n";
  CHECK(diff <= kTol);

  // The generation engine's path: the prompt's real tokens into the paged KV cache, then one token
  // at a time; compared at the last prompt position and every decoded one.
  const int64_t steps = ids.size(1), prompt = 5;
  auto cached = rqat::test::paged_cached_logits(*model, ids, mask, prompt);
  auto decoded = real.narrow(1, prompt - 1, steps - prompt + 1);
  const double cached_diff = (cached.narrow(1, prompt - 1, steps - prompt + 1) -
                              expected.narrow(1, prompt - 1, steps - prompt + 1))
                                 .index({decoded})
                                 .abs()
                                 .max()
                                 .item<double>();
  std::cout << name << ": paged KV-cache decode max |logit diff| vs transformers = " << cached_diff
            << "\n";
  CHECK(cached_diff <= kTol);
}

}  // namespace

TEST_CASE("qwen2 (GQA 3, q/k/v bias, untied) matches transformers", "[qwen2]") {
  check_case("qwen2_gqa3");
}
TEST_CASE("qwen3 (head_dim != hidden/heads, q/k norm, tied) matches transformers", "[qwen3]") {
  check_case("qwen3_headdim");
}
TEST_CASE("llama (llama3 rope scaling, sharded checkpoint) matches transformers", "[llama]") {
  check_case("llama_rope3_sharded");
}

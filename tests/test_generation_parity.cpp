// Generation parity with Hugging Face transformers: tiny random models of each family written by
// tests/python/make_generation_fixtures.py, and the tokens of transformers' greedy
// `generate(do_sample=False, max_new_tokens=32)` on a left-padded batch of prompts of different
// lengths (EOS disabled). rqat's engine must produce exactly the same tokens, with every prompt in
// one batch and with continuous batching over fewer slots than prompts. Tags select a family:
// "[qwen3]".
#include <cstdlib>
#include <iostream>

#include "generation/generation_engine.h"
#include "io/json_file.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "test_util.h"

namespace {

void check_case(const std::string& name) {
  const char* root = std::getenv("RQAT_GENERATION_FIXTURES");
  REQUIRE(root != nullptr);
  const auto dir = std::filesystem::path(root) / name;
  REQUIRE(std::filesystem::exists(std::filesystem::path(root) / ".complete"));
  const auto fixture = rqat::io::read_json_file(dir / "generation.json");
  auto model = rqat::quant::load_model(dir / "model");

  std::vector<rqat::generation::GenerationRequest> requests;
  std::vector<std::vector<int32_t>> expected;
  for (size_t i = 0; i < fixture["prompts"].size(); ++i) {
    rqat::generation::GenerationRequest r;
    r.prompt_ids = fixture["prompts"][i].get<std::vector<int32_t>>();
    r.params.temperature = 0;
    r.params.max_new_tokens = fixture["max_new_tokens"].get<int64_t>();
    requests.push_back(std::move(r));
    expected.push_back(fixture["expected"][i].get<std::vector<int32_t>>());
  }
  for (const int64_t max_batch : {int64_t{16}, int64_t{3}, int64_t{1}}) {
    rqat::generation::GenerationEngine engine(*model, nullptr,
                                              rqat::generation::EngineOptions{max_batch});
    const auto results = engine.generate(requests);
    REQUIRE(results.size() == expected.size());
    size_t same = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      INFO(name << " max_batch " << max_batch << " prompt " << i);
      CHECK(results[i].token_ids == expected[i]);
      same += results[i].token_ids == expected[i];
    }
    std::cout << name << " max_batch " << max_batch << ": " << same << "/" << results.size()
              << " prompts generate transformers' exact greedy tokens\n";
  }
}

}  // namespace

TEST_CASE("qwen2 greedy generation matches transformers", "[qwen2]") { check_case("qwen2_gqa3"); }
TEST_CASE("qwen3 greedy generation matches transformers", "[qwen3]") {
  check_case("qwen3_headdim");
}
TEST_CASE("llama greedy generation matches transformers", "[llama]") {
  check_case("llama_rope3_sharded");
}

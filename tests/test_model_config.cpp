// config.json parsing: both transformers layouts, llama3 rope scaling, and one-line errors naming
// the field for every kind of bad value.
#include "model/model_config.h"
#include "test_util.h"

using rqat::io::Json;
using rqat::model::ModelConfig;
using rqat::test::require_error;

namespace {

Json base_config() {
  return {{"model_type", "qwen3"},       {"hidden_size", 64},
          {"intermediate_size", 128},    {"num_hidden_layers", 2},
          {"num_attention_heads", 4},    {"num_key_value_heads", 2},
          {"vocab_size", 100},           {"head_dim", 32},
          {"rms_norm_eps", 1e-6},        {"rope_theta", 1e6},
          {"tie_word_embeddings", true}, {"eos_token_id", 7}};
}

}  // namespace

TEST_CASE("config: qwen3 fields and derived sizes") {
  auto c = ModelConfig::from_json(base_config(), "config.json");
  CHECK(c.family == rqat::model::Family::kQwen3);
  CHECK(c.head_dim == 32);
  CHECK(c.q_dim() == 128);
  CHECK(c.kv_dim() == 64);
  CHECK(c.num_kv_groups() == 2);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.tie_word_embeddings);
  CHECK(c.eos_token_ids == std::vector<int64_t>{7});
  CHECK(c.rope_theta == 1e6);
}

TEST_CASE("config: qwen2 has q/k/v bias and head_dim from hidden/heads") {
  auto j = base_config();
  j["model_type"] = "qwen2";
  j.erase("head_dim");
  j["eos_token_id"] = Json::array({1, 2});
  auto c = ModelConfig::from_json(j, "config.json");
  CHECK(c.attention_bias);
  CHECK_FALSE(c.o_proj_bias);
  CHECK(c.head_dim == 16);
  CHECK(c.eos_token_ids == std::vector<int64_t>{1, 2});
}

TEST_CASE("config: llama3 rope scaling in the classic and the transformers-5 layout") {
  const Json scaling = {{"rope_type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  auto classic = base_config();
  classic["model_type"] = "llama";
  classic["rope_theta"] = 500000.0;
  classic["rope_scaling"] = scaling;
  auto v5 = classic;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  for (const auto& j : {classic, v5}) {
    auto c = ModelConfig::from_json(j, "config.json");
    REQUIRE(c.rope_llama3.has_value());
    CHECK(c.rope_llama3->factor == 32.0);
    CHECK(c.rope_llama3->original_max_position_embeddings == 8192);
    CHECK(c.rope_theta == 500000.0);
    // Saving writes the classic layout, which parses back to the same settings.
    auto again = ModelConfig::from_json(c.to_json(), "saved");
    CHECK(again.rope_theta == c.rope_theta);
    CHECK(again.rope_llama3->factor == 32.0);
    CHECK_FALSE(c.to_json().contains("rope_parameters"));
  }
}

TEST_CASE("config: to_json keeps unknown keys and round-trips") {
  auto j = base_config();
  j["some_future_key"] = "kept";
  auto c = ModelConfig::from_json(j, "config.json");
  auto out = c.to_json();
  CHECK(out["some_future_key"] == "kept");
  CHECK(out["architectures"][0] == "Qwen3ForCausalLM");
  auto again = ModelConfig::from_json(out, "saved");
  CHECK(again.hidden_size == c.hidden_size);
  CHECK(again.head_dim == c.head_dim);
  CHECK(again.tie_word_embeddings == c.tie_word_embeddings);
}

TEST_CASE("config: bad fields give one-line errors naming the field") {
  auto bad = [](auto mutate, std::initializer_list<std::string> needles) {
    auto j = base_config();
    mutate(j);
    require_error([&] { ModelConfig::from_json(j, "dir/config.json"); }, needles);
  };
  bad([](Json& j) { j.erase("hidden_size"); }, {"dir/config.json", "'hidden_size'", "missing"});
  bad([](Json& j) { j["hidden_size"] = -3; }, {"'hidden_size'", "positive integer"});
  bad([](Json& j) { j["num_hidden_layers"] = "two"; }, {"'num_hidden_layers'"});
  bad([](Json& j) { j["vocab_size"] = 1.5; }, {"'vocab_size'"});
  bad([](Json& j) { j["num_key_value_heads"] = 3; }, {"'num_key_value_heads'", "divide"});
  bad([](Json& j) { j["model_type"] = "gpt2"; }, {"'model_type'", "gpt2", "qwen2, qwen3 or llama"});
  bad([](Json& j) { j.erase("model_type"); }, {"'model_type'", "missing"});
  bad(
      [](Json& j) {
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
      },
      {"rope_scaling.rope_type", "yarn"});
  bad([](Json& j) { j["rope_theta"] = -1; }, {"'rope_theta'"});
  bad([](Json& j) { j["hidden_act"] = "gelu"; }, {"'hidden_act'", "silu"});
  bad([](Json& j) { j["head_dim"] = 7; }, {"'head_dim'", "even"});
  bad([](Json& j) { j["tie_word_embeddings"] = "yes"; }, {"'tie_word_embeddings'"});
  bad([](Json& j) { j["use_sliding_window"] = true; }, {"'use_sliding_window'"});
  bad([](Json& j) { j["eos_token_id"] = "x"; }, {"'eos_token_id'"});
  bad(
      [](Json& j) {
        j.erase("head_dim");
        j["hidden_size"] = 66;
      },
      {"'hidden_size'", "head_dim"});
}

TEST_CASE("config: unreadable files are named") {
  rqat::test::TempDir dir("cfg");
  require_error([&] { ModelConfig::load(dir / "config.json"); }, {"config.json", "cannot open"});
  rqat::test::write_bytes(dir / "config.json", "{\"model_type\": ");
  require_error([&] { ModelConfig::load(dir / "config.json"); }, {"config.json", "invalid JSON"});
}

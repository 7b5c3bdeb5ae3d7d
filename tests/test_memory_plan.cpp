// The memory plan (train/memory_plan.h, tools/plan_memory_command.h): parameter counts equal the
// instantiated models' named_parameters() for qwen2/qwen3/llama, tied and untied, with every bias
// option; LoRA counts equal the trainable parameters attach_lora leaves; each shard mode's lines
// equal their closed forms on a tiny config (optimizer state falls by W, the teacher is split by
// full sharding, the KV cache and activations follow their formulas); the Qwen3-8B and Qwen3-4B
// shapes have their published sizes; bad flags are one-line errors naming the flag.
#include "catch.h"

#include <map>
#include <sstream>

#include "model/decoder.h"
#include "model/model_config.h"
#include "test_util.h"
#include "tools/plan_memory_command.h"
#include "train/lora_model.h"
#include "train/memory_plan.h"

using rqat::model::CausalLM;
using rqat::model::Family;
using rqat::model::ModelConfig;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::train::MemoryPlanInput;
using rqat::train::ParameterCounts;
using rqat::train::ShardMode;

namespace {

// The counts of an instantiated model, from its parameter names.
ParameterCounts instantiated_counts(CausalLM& model, bool trainable_only) {
  ParameterCounts n;
  std::map<std::string, int64_t> per_layer;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (trainable_only && !item.value().requires_grad()) continue;
    const std::string& name = item.key();
    const int64_t count = item.value().numel();
    n.total += count;
    if (name.rfind("model.layers.", 0) == 0) {
      n.layers += count;
      const auto end = name.find('.', 13);
      per_layer[name.substr(0, end)] += count;
    }
  }
  n.root = n.total - n.layers;
  for (const auto& [layer, count] : per_layer) n.largest_layer = std::max(n.largest_layer, count);
  return n;
}

void check_same(const ParameterCounts& got, const ParameterCounts& want) {
  CHECK(got.total == want.total);
  CHECK(got.layers == want.layers);
  CHECK(got.root == want.root);
  CHECK(got.largest_layer == want.largest_layer);
}

ModelConfig config_with(Family family, bool tied, rqat::io::Json extra) {
  rqat::io::Json j = rqat::test::tiny_config(family, tied).raw;
  for (const auto& [key, value] : extra.items()) j[key] = value;
  return ModelConfig::from_json(j, "test");
}

ModelConfig shape(int64_t hidden, int64_t intermediate, int64_t vocab, bool tied) {
  return ModelConfig::from_json({{"model_type", "qwen3"},
                                 {"hidden_size", hidden},
                                 {"intermediate_size", intermediate},
                                 {"num_hidden_layers", 36},
                                 {"num_attention_heads", 32},
                                 {"num_key_value_heads", 8},
                                 {"head_dim", 128},
                                 {"vocab_size", vocab},
                                 {"tie_word_embeddings", tied}},
                                "shape");
}

}  // namespace

TEST_CASE("parameter counts equal the instantiated model's named_parameters") {
  const std::vector<rqat::io::Json> variants = {
      rqat::io::Json::object(),
      {{"attention_bias", true}},                       // qwen3/llama: q/k/v/o biases
      {{"attention_bias", true}, {"mlp_bias", true}}};  // llama: MLP biases too
  for (const Family family : {Family::kQwen2, Family::kQwen3, Family::kLlama})
    for (const bool tied : {true, false})
      for (const auto& extra : variants) {
        const ModelConfig config = config_with(family, tied, extra);
        INFO(rqat::enum_name(family) << " tied " << tied << " " << extra.dump());
        CausalLM model(config, at::TensorOptions(at::kFloat));
        check_same(rqat::train::count_parameters(config), instantiated_counts(model, false));
      }
}

TEST_CASE("LoRA counts equal the parameters attach_lora leaves trainable") {
  const std::vector<std::vector<std::string>> target_sets = {
      {},                            // the default: 7 projections per block
      {R"(.*\.q_proj)", "lm_head"},  // lm_head counts as root
      {R"(model\.layers\.0\..*)"},   // one layer: the largest is layer 0
      {R"(.*\.(gate|up|down)_proj)"}};
  for (const Family family : {Family::kQwen2, Family::kQwen3, Family::kLlama})
    for (const bool tied : {true, false})
      for (const auto& targets : target_sets) {
        if (tied && targets.size() == 2) continue;  // a tied model has no lm_head layer
        const ModelConfig config = rqat::test::tiny_config(family, tied);
        INFO(rqat::enum_name(family) << " tied " << tied << " targets " << targets.size());
        CausalLM model(config, at::TensorOptions(at::kFloat));
        rqat::model::LoraOptions options;
        options.rank = 3;
        rqat::train::attach_lora(model, options, targets);
        const auto lora = rqat::train::count_lora_parameters(config, 3, targets);
        check_same(lora, instantiated_counts(model, /*trainable_only=*/true));
        CHECK(instantiated_counts(model, false).total ==
              rqat::train::count_parameters(config).total + lora.total);
      }
  const ModelConfig config = rqat::test::tiny_config(Family::kQwen3, false);
  require_error([&] { rqat::train::count_lora_parameters(config, 4, {"nothing"}); },
                {"--lora-target-modules", "matches no linear layer"});
  require_error([&] { rqat::train::count_lora_parameters(config, 4, {"(unclosed"}); },
                {"--lora-target-modules", "(unclosed"});
  require_error([&] { rqat::train::count_lora_parameters(config, 0, {}); }, {"--lora-rank"});
}

TEST_CASE("each shard mode's lines equal their closed forms") {
  const ModelConfig config = rqat::test::tiny_config(Family::kQwen3, /*tied=*/false);
  // h 48, 6 heads of 12 (q 72), 2 kv heads (kv 24), intermediate 80, vocab 97, 2 layers.
  const int64_t layer = 2 * 48 + 48 * 72 + 2 * 48 * 24 + 72 * 48 + 2 * 12 + 3 * 48 * 80;
  const int64_t root = 2 * 97 * 48 + 48;
  const int64_t n = 2 * layer + root;
  REQUIRE(rqat::train::count_parameters(config).total == n);
  // 4h + (q + 2kv) + 2q + 4i + (q + kv) = 192 + 120 + 144 + 320 + 96.
  REQUIRE(rqat::train::activation_elements_per_token(config) == 872);

  MemoryPlanInput in;
  in.model = config;
  in.compute_bytes = 2;
  in.micro_batch = 3;
  in.sequence_length = 10;
  const int64_t tokens = 30, c = 2;
  const int64_t logits = tokens * 97 * 4;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };

  for (const int64_t w : {1, 4, 7}) {
    in.world_size = w;
    in.shard = ShardMode::kNone;
    auto p = rqat::train::plan_memory(in);
    CHECK(p.weights == n * 4);
    CHECK(p.gradients == n * 4);
    CHECK(p.master == 0);
    CHECK(p.moments == n * 8);
    CHECK(p.transient == n * 2);  // autocast's bf16 copies
    CHECK_FALSE(p.checkpointed);
    CHECK(p.activations == 2 * tokens * 872 * c + logits);
    CHECK(p.total == n * 16 + p.activations + p.transient);

    in.shard = ShardMode::kOptimizer;
    p = rqat::train::plan_memory(in);
    CHECK(p.weights == n * c);
    CHECK(p.gradients == n * c + ceil_div(n, w) * 4);
    CHECK(p.master == ceil_div(n, w) * 4);
    CHECK(p.moments == ceil_div(n, w) * 8);
    CHECK(p.transient == 0);
    CHECK(p.activations == p.activations_full);

    in.shard = ShardMode::kGradients;
    p = rqat::train::plan_memory(in);
    CHECK(p.weights == n * c);
    CHECK(p.gradients == root * c + ceil_div(n, w) * 4);
    CHECK(p.checkpointed);  // forced
    // Each layer's input plus one layer in full, plus the logits.
    CHECK(p.activations == tokens * 48 * c * 2 + tokens * 872 * c + logits);

    in.shard = ShardMode::kParameters;
    p = rqat::train::plan_memory(in);
    CHECK(p.weights == root * c);
    CHECK(p.gradients == root * c + ceil_div(n, w) * 4);
    CHECK(p.master == ceil_div(n, w) * 4);
    CHECK(p.moments == ceil_div(n, w) * 8);
    CHECK(p.transient == 2 * layer * c);
    CHECK(p.total == p.weights + p.gradients + p.master + p.moments + p.activations + p.transient);
  }

  SECTION("optimizer state falls by the world size") {
    in.shard = ShardMode::kOptimizer;
    in.world_size = 1;
    const auto one = rqat::train::plan_memory(in);
    in.world_size = 8;
    const auto eight = rqat::train::plan_memory(in);
    CHECK(eight.moments == ceil_div(one.moments / 8, 8) * 8);
    CHECK(std::abs(static_cast<double>(eight.master) * 8 - static_cast<double>(one.master)) <= 32);
  }

  SECTION("teacher, reference and rollouts") {
    in.world_size = 4;
    in.frozen = rqat::test::tiny_config(Family::kQwen3, /*tied=*/true);
    const int64_t teacher_layer = layer, teacher_root = 97 * 48 + 48;
    in.shard = ShardMode::kOptimizer;
    CHECK(rqat::train::plan_memory(in).frozen_weights == (2 * teacher_layer + teacher_root) * c);
    in.shard = ShardMode::kParameters;
    auto p = rqat::train::plan_memory(in);
    CHECK(p.frozen_weights == (teacher_root + ceil_div(2 * teacher_layer, 4)) * c);
    CHECK(p.transient == 2 * layer * c + teacher_layer * c);
    in.frozen_logits = true;
    CHECK(rqat::train::plan_memory(in).activations == p.activations + logits);

    in.rollouts = rqat::train::RolloutShape{2, 5, 10};
    p = rqat::train::plan_memory(in);
    CHECK(p.kv_cache == 2 * 5 * 10 * 2 * 2 * 2 * 12 * c);
    // Full sharding gathers the policy's layers for the rollouts, next to the KV cache.
    CHECK(p.rollout_weights == 2 * layer * c);
    CHECK(p.total == p.weights + p.gradients + p.master + p.moments + p.frozen_weights +
                         std::max(p.kv_cache + p.rollout_weights, p.activations + p.transient));
    in.shard = ShardMode::kGradients;
    CHECK(rqat::train::plan_memory(in).rollout_weights == 0);  // the layers are resident
    // Unsharded grpo keeps a float32 policy next to a bf16 reference.
    in.shard = ShardMode::kNone;
    in.compute_bytes = 4;
    in.frozen_bytes = 2;
    CHECK(rqat::train::plan_memory(in).frozen_weights == (2 * teacher_layer + teacher_root) * 2);
  }

  SECTION("LoRA trains the adapters; the frozen base is not sharded") {
    in.lora = rqat::train::LoraAdapters{4, {}};
    in.world_size = 2;
    in.shard = ShardMode::kParameters;
    const auto p = rqat::train::plan_memory(in);
    const int64_t adapters_per_layer =
        4 * ((48 + 72) + 2 * (48 + 24) + (72 + 48) + 2 * (48 + 80) + (80 + 48));
    CHECK(p.trainable.total == 2 * adapters_per_layer);
    CHECK(p.trainable.root == 0);
    CHECK(p.parameters.total == n + 2 * adapters_per_layer);
    CHECK(p.weights == n * c);  // (N - T_L) x c: the base and nothing of the adapters
    CHECK(p.moments == adapters_per_layer * 8);
    CHECK(p.transient == 2 * adapters_per_layer * c);
  }

  SECTION("fake quantization keeps each layer's quantized weights for the backward") {
    in.shard = ShardMode::kOptimizer;
    const auto plain = rqat::train::plan_memory(in);
    in.fake_quant = true;
    const auto quantized = rqat::train::plan_memory(in);
    const int64_t linear = 2 * 48 * 72 + 2 * 48 * 24 + 3 * 48 * 80;
    CHECK(quantized.activations_full == plain.activations_full + 2 * linear * c);
    CHECK(quantized.activations_checkpointed == plain.activations_checkpointed + linear * c);
  }
}

TEST_CASE("the Qwen3-8B and Qwen3-4B shapes have their published sizes") {
  const auto qwen3_8b = rqat::train::count_parameters(shape(4096, 12288, 151936, false));
  CHECK(qwen3_8b.total == 8190735360);  // "8.2B"
  CHECK(qwen3_8b.largest_layer == 192946432);
  CHECK(qwen3_8b.root == 2 * 151936 * 4096 + 4096);
  const auto qwen3_4b = rqat::train::count_parameters(shape(2560, 9728, 151936, true));
  CHECK(qwen3_4b.total == 4022468096);  // "4.0B"

  // Full training, no sharding: 16 bytes per parameter before activations (issue 19).
  MemoryPlanInput in;
  in.model = shape(4096, 12288, 151936, false);
  const auto p = rqat::train::plan_memory(in);
  CHECK(p.weights + p.gradients + p.master + p.moments == 16 * qwen3_8b.total);
}

TEST_CASE("plan-memory: flags become the trainers' shapes; bad ones are one-line errors") {
  TempDir dir("plan-memory");
  std::filesystem::create_directories(dir / "m");
  rqat::io::write_json_file(dir / "m" / "config.json",
                            rqat::test::tiny_config(Family::kQwen3, false).raw);
  rqat::tools::PlanMemoryOptions o;
  o.model_dir = dir / "m";
  o.tool = rqat::tools::PlanTool::kGrpo;
  o.world_size = 4;
  o.prompts_per_step = 8;
  o.num_generations = 4;
  o.minibatches = 2;
  o.max_prompt_length = 100;
  o.max_new_tokens = 200;
  auto in = rqat::tools::memory_plan_input(o);
  CHECK(in.rollouts->prompts_per_rank == 2);
  CHECK(in.micro_batch == 4);  // 2 prompts x 4 completions in 2 minibatches
  CHECK(in.sequence_length == 300);
  CHECK_FALSE(in.frozen);
  o.kl_beta = 0.04;
  o.micro_batch_size = 1;
  o.mode = rqat::tools::PolicyMode::kQlora;
  in = rqat::tools::memory_plan_input(o);
  CHECK(in.frozen);
  CHECK(in.micro_batch == 1);
  CHECK(in.lora);

  std::ostringstream out, err;
  o.gpu_memory_gib = 1e-6;
  rqat::tools::run_plan_memory_command(o, out, err);
  CHECK(out.str().find("KV cache") != std::string::npos);
  CHECK(out.str().find("warning: grpo needs") != std::string::npos);
  o.json = true;
  std::ostringstream json, json_err;
  rqat::tools::run_plan_memory_command(o, json, json_err);
  const auto j = rqat::io::Json::parse(json.str());
  CHECK(j.at("fits") == false);
  CHECK(j.at("bytes").at("total").get<int64_t>() > 0);
  CHECK(json_err.str().find("warning:") == 0);

  rqat::tools::PlanMemoryOptions bad = o;
  bad.world_size = 3;
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--prompts-per-step", "3"});
  bad = o;
  bad.world_size = 0;
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--world-size"});
  bad = o;
  bad.dtype = "fp8";
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--dtype", "fp8"});
  bad = o;
  bad.tool = rqat::tools::PlanTool::kQatKd;
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--mode qlora"});
  bad.mode = rqat::tools::PolicyMode::kFull;
  bad.batch_size = 6;
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--batch-size 6", "--world-size 4"});
  bad = o;
  bad.model_dir = dir / "missing";
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--model", "no config.json"});
  bad.model_dir.clear();
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--model DIR or --config FILE"});
  bad = o;
  bad.teacher_dir = dir / "m";
  require_error([&] { rqat::tools::memory_plan_input(bad); }, {"--teacher", "qat-kd"});
}

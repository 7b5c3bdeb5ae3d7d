// See decode_graph_check.h.
#include "tools/decode_graph_check.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <chrono>

#include "generation/generation_engine.h"
#include "model/decoder.h"
#include "model/init.h"
#include "model/model_config.h"

namespace rqat::tools {

namespace {

constexpr int64_t kPrompts = 8, kPromptTokens = 16, kNewTokens = 48;

model::ModelConfig check_config() {
  const io::Json j = {
      {"model_type", "qwen3"},   {"hidden_size", 256},          {"intermediate_size", 512},
      {"num_hidden_layers", 4},  {"num_attention_heads", 4},    {"num_key_value_heads", 2},
      {"head_dim", 64},          {"vocab_size", 1024},          {"rms_norm_eps", 1e-6},
      {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}, {"max_position_embeddings", 512}};
  return model::ModelConfig::from_json(j, "rqat doctor's decode-graph model");
}

// Restores the process's kernel mode when it goes.
class ModeRestorer {
 public:
  explicit ModeRestorer(ops::KernelMode mode) : saved_(ops::kernel_mode()) {
    ops::set_kernel_mode(mode);
  }
  ~ModeRestorer() { ops::set_kernel_mode(saved_); }
  ModeRestorer(const ModeRestorer&) = delete;
  ModeRestorer& operator=(const ModeRestorer&) = delete;

 private:
  ops::KernelMode saved_;
};

}  // namespace

DecodeGraphCheck check_decode_graphs(const c10::Device& device) {
  DecodeGraphCheck out;
  out.timing.kernel = ops::Kernel::kCudaGraphs;
  out.timing.shape =
      fmt::format("decode step of a 4-layer hidden-256 Qwen3 model, bf16, {} rows", kPrompts);
  out.check.cases = 1;
  out.check.worst_case = fmt::format("{} prompts x {} greedy tokens", kPrompts, kNewTokens);
  const auto start = std::chrono::steady_clock::now();
  try {
    model::CausalLM model(check_config(), at::TensorOptions(device).dtype(at::kBFloat16));
    model::init_random(model, /*seed=*/11, /*std=*/0.1);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
    std::vector<generation::GenerationRequest> requests(kPrompts);
    for (auto& r : requests) {
      const auto ids = at::randint(1, 1024, {kPromptTokens}, gen, at::kInt);
      r.prompt_ids.assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + kPromptTokens);
      r.params.temperature = 0;
      r.params.max_new_tokens = kNewTokens;
    }
    const auto decode = [&](bool graphs, double& ms_per_step) {
      generation::EngineOptions options;
      options.max_batch = kPrompts;
      options.cuda_graphs = graphs;
      generation::GenerationEngine engine(model, nullptr, options);
      engine.generate(requests);  // warm-up: capture, allocator, cuBLAS handles
      auto results = engine.generate(requests);
      ms_per_step =
          1e3 * engine.stats().seconds / std::max<int64_t>(1, engine.stats().decode_steps);
      return results;
    };
    const auto eager = decode(false, out.timing.twin_ms);
    ModeRestorer unchecked(ops::KernelMode::kCustom);  // the graphs themselves, not the fallback
    const auto replayed = decode(true, out.timing.custom_ms);
    double differing = 0;
    for (size_t i = 0; i < eager.size(); ++i) {
      const auto& a = eager[i].token_ids;
      const auto& b = replayed[i].token_ids;
      for (size_t t = 0; t < std::max(a.size(), b.size()); ++t)
        differing += t >= a.size() || t >= b.size() || a[t] != b[t];
    }
    out.check.worst_error = differing;
    out.check.passed = differing == 0;
  } catch (const std::exception& e) {
    const std::string message = e.what();
    out.check.passed = false;
    out.check.failure = message.substr(0, message.find('\n'));
    out.timing.error = out.check.failure;
  }
  out.check.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace rqat::tools

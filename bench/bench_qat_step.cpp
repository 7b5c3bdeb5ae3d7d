// One qat-kd training step on the CPU, or with --device cuda on a GPU (scripts/bench_qat runs it
// next to a plain PyTorch peer, scripts/bench_qat_reference.py, on the same model, batch, threads
// and device; scripts/gpu-check on CUDA):
//   teacher: a random Llama-style CausalLM (init_random, std 0.02), forward in no-grad
//   student: a copy whose every decoder Linear is a FakeQuantLinear (RTN min-max init, frozen
//            scales and zeros: the fused STE path); embeddings, norms and lm_head stay float
//   loss:    forward KL(teacher || student) at every position (train::distill_loss, T = 1)
//   then backward, gradient clipping to norm 1.0 and one AdamW step with the tools' optimizer
//            (train::TrainingOptimizer: the fused update; weight decay on every tensor, as the
//            peer's torch.optim.AdamW defaults).
// The first steps are warmup; the median of the timed steps gives tokens/s. The teacher weights and
// the token batch go to --weights-out (safetensors) so that the peer starts from the same numbers;
// both print the loss of the first step (computed from the initial weights) to compare numerics.
// Then one more step counted at the dispatcher (bench/op_counter.h): its kernel launches, host
// reads and tensor moves, what it would cost a GPU (the launch-bound time on an H200 is printed
// as an estimate).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <map>
#include <vector>

#include "gpu_cost.h"

#include "io/error.h"
#include "io/safetensors.h"
#include "model/decoder.h"
#include "model/init.h"
#include "model/model_config.h"
#include "quant/fake_quant_linear.h"
#include "quant/quant_spec.h"
#include "train/distill_loss.h"
#include "train/training_optimizer.h"

namespace {

struct Shape {
  int64_t hidden = 256, layers = 4, heads = 8, kv_heads = 4, intermediate = 688, vocab = 2048;
  int64_t batch = 8, seq = 256;
};

rqat::model::ModelConfig llama_config(const Shape& s) {
  if (s.heads < 1 || s.kv_heads < 1 || s.hidden % s.heads != 0 || s.heads % s.kv_heads != 0)
    rqat::fail("bench_qat_step: --heads must divide --hidden and be a multiple of --kv-heads");
  rqat::model::ModelConfig c;
  c.family = rqat::model::Family::kLlama;
  c.model_type = "llama";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = std::max<int64_t>(s.seq, 4096);
  c.tie_word_embeddings = false;
  return c;
}

// Sum of every fake-quantized decoder weight in float64: the peer prints the same number for its
// own RTN initialization, which shows that both quantized the same weights to the same grid.
double quantized_checksum(rqat::model::CausalLM& model) {
  at::NoGradGuard no_grad;
  double sum = 0;
  for (const auto& slot : model.linear_layers())
    sum += (*slot.layer)->effective_weight().sum(at::kDouble).item<double>();
  return sum;
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rqat qat-kd step benchmark: tokens/s of one distillation training step"};
  Shape s;
  int bits = 2, threads = 1, warmup = 2, steps = 5;
  int64_t group = 64;
  uint64_t seed = 0;
  double lr = 1e-4, weight_decay = 0.01, max_grad_norm = 1.0;
  std::string weights_out, device_name = "cpu";
  app.add_option("--hidden", s.hidden, "Hidden size")->capture_default_str();
  app.add_option("--layers", s.layers, "Decoder layers")->capture_default_str();
  app.add_option("--heads", s.heads, "Attention heads")->capture_default_str();
  app.add_option("--kv-heads", s.kv_heads, "Key/value heads (GQA)")->capture_default_str();
  app.add_option("--intermediate", s.intermediate, "SwiGLU width")->capture_default_str();
  app.add_option("--vocab", s.vocab, "Vocabulary size")->capture_default_str();
  app.add_option("--batch", s.batch, "Sequences per step")->capture_default_str();
  app.add_option("--seq", s.seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--bits", bits, "Weight bits of the student (2, 3, 4, 8)")->capture_default_str();
  app.add_option("--group-size", group, "Quantization group size (-1: per channel)")
      ->capture_default_str();
  app.add_option("--lr", lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--max-grad-norm", max_grad_norm, "Gradient clipping norm")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (at::set_num_threads)")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first (>= 1)")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps; the median counts")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the weights and the batch")->capture_default_str();
  app.add_option("--weights-out", weights_out,
                 "Write the teacher weights and input_ids here (safetensors) for the peer");
  app.add_option("--device", device_name, "cpu, cuda or cuda:N (the weights are made on the CPU)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (warmup < 1 || steps < 1) rqat::fail("bench_qat_step: --warmup and --steps must be >= 1");
    at::set_num_threads(threads);
    const rqat::model::ModelConfig config = llama_config(s);
    const at::Device device(device_name);
    const auto cpu = at::TensorOptions().dtype(at::kFloat);
    const auto options = cpu.device(device);

    // The weights and the batch are drawn on the CPU, so that every device starts from the same
    // numbers as the peer, then copied to the device.
    auto cpu_teacher = std::make_shared<rqat::model::CausalLM>(config, cpu);
    rqat::model::init_random(*cpu_teacher, seed);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
    const auto cpu_input_ids = at::randint(s.vocab, {s.batch, s.seq}, gen, at::kLong);
    if (!weights_out.empty()) {
      auto tensors = cpu_teacher->state_tensors();
      tensors.emplace_back("input_ids", cpu_input_ids);
      rqat::io::save_safetensors(weights_out, tensors);
    }
    const auto input_ids = cpu_input_ids.to(device);
    auto copy_of_teacher = [&] {
      auto model = std::make_shared<rqat::model::CausalLM>(config, options);
      at::NoGradGuard no_grad;
      std::map<std::string, at::Tensor> source;
      for (const auto& item : cpu_teacher->named_parameters()) source[item.key()] = item.value();
      for (auto& item : model->named_parameters()) item.value().copy_(source.at(item.key()));
      return model;
    };
    auto teacher = copy_of_teacher();
    for (auto& p : teacher->parameters()) p.requires_grad_(false);

    // The student: the teacher's weights, then every decoder Linear fake-quantized.
    auto student = copy_of_teacher();
    rqat::quant::QuantSpec spec;
    spec.bits = bits;
    spec.group_size = group;
    spec.validate("bench_qat_step");
    for (const auto& slot : student->linear_layers()) {
      const auto& dense = *slot.layer;
      rqat::quant::FakeQuantOptions fq;
      fq.name = slot.name;
      student->replace_linear(
          slot, rqat::quant::FakeQuantLinear::from_rtn(dense->effective_weight().detach(), spec,
                                                       dense->bias(), fq));
    }
    // Frozen scales and zeros are registered parameters without requires_grad: leave them out.
    std::vector<rqat::train::NamedParameter> params;
    int64_t trained = 0;
    for (const auto& item : student->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      params.push_back({item.key(), item.value(), /*decay=*/true});
      trained += item.value().numel();
    }
    rqat::train::TrainingOptimizer optimizer(
        std::move(params), rqat::train::AdamWSettings{.lr = lr, .weight_decay = weight_decay});
    const auto mask = at::ones({s.batch, s.seq}, options.dtype(at::kBool));
    const rqat::train::DistillOptions kd;  // forward KL, T = 1, full vocabulary

    auto step = [&]() {
      optimizer.zero_grad();
      at::Tensor teacher_logits;
      {
        at::NoGradGuard no_grad;
        teacher_logits = teacher->forward(input_ids);
      }
      const auto out = rqat::train::distill_loss(student->forward(input_ids), teacher_logits, mask,
                                                 at::Tensor(), kd);
      out.loss.backward();
      optimizer.clip_grad_norm(max_grad_norm);
      optimizer.step();
      return out.loss.item<double>();
    };

    std::cout << fmt::format("student: {} trained parameters, sum(w_q) {:.9e}\n", trained,
                             quantized_checksum(*student));
    double first_loss = 0, last_loss = 0;
    // Wall time counts; process CPU time (all threads) is printed beside it because on a shared
    // machine it is much less sensitive to other load.
    std::vector<double> seconds, cpu_seconds;
    for (int i = 0; i < warmup + steps; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const std::clock_t cpu_start = std::clock();
      last_loss = step();
      const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      if (i == 0) first_loss = last_loss;
      if (i >= warmup) {
        seconds.push_back(took.count());
        cpu_seconds.push_back(cpu);
      }
    }
    const double median = median_of(seconds), cpu_median = median_of(cpu_seconds);
    const double tokens_per_s = static_cast<double>(s.batch * s.seq) / median;
    std::cout << fmt::format(
        "rqat qat-kd step: hidden {} x {} layers, {} heads / {} kv, mlp {}, vocab {}, batch {} x "
        "{}, W{} g{}, {}, {} thread(s): median {:.4f} s (min {:.4f}, CPU {:.4f} s) over {} steps = "
        "{:.0f} tokens/s\n",
        s.hidden, s.layers, s.heads, s.kv_heads, s.intermediate, s.vocab, s.batch, s.seq, bits,
        group, device.str(), threads, median, *std::min_element(seconds.begin(), seconds.end()),
        cpu_median, seconds.size(), tokens_per_s);
    std::cout << fmt::format(
        "RESULT tokens_per_s={:.3f} seconds={:.6f} cpu_seconds={:.6f} "
        "first_loss={:.12e} last_loss={:.12e}\n",
        tokens_per_s, median, cpu_median, first_loss, last_loss);
    rqat::bench::OpCounts cost;
    {
      rqat::bench::OpCounter counter;
      step();
      cost = counter.counts();
    }
    std::cout << fmt::format(
        "rqat qat-kd step, counted at the dispatcher: {}\n  most launched: {}\n  estimate on "
        "an H200: {:.3f} ms launch-bound (launches x 4 us, eager)\n",
        cost.summary(), cost.top_launches(), rqat::bench::h200_estimate(cost, 0, 0).launch_ms);
    std::cout << fmt::format("RESULT step_launches={} step_syncs={} step_host_bytes={}\n",
                             cost.launches, cost.syncs, cost.host_bytes);
  } catch (const std::exception& e) {
    std::cerr << "bench_qat_step: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

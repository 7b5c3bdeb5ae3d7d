// Generation throughput of rqat's engine on a model directory: the prompts (token ids) come from a
// JSON file {"prompts": [[ids...], ...]} so a peer (transformers, in scripts/bench_generate) runs
// the very same work. Prints generated tokens/s; EOS is not a stop token, so every sample runs
// --max-new-tokens tokens.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>

#include "generation/generation_engine.h"
#include "generation/sampler.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/model_dir.h"

namespace {

// Milliseconds per call of fn, over `reps` calls after one warm-up call.
template <class Fn>
double time_ms(int reps, Fn&& fn) {
  fn();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         reps;
}

// Where a decode step's time goes: the cached forward at a typical cache length, against the same
// batch through the plain forward (one token, no cache: the layers' compute without cache
// handling), and the sampling of the logits.
void print_breakdown(rqat::model::CausalLM& model, int64_t batch, size_t prompt, int64_t max_new) {
  c10::InferenceMode guard;
  const int64_t fill = static_cast<int64_t>(prompt) + max_new / 2;
  auto cache = model.make_cache(batch, fill + 64);
  std::vector<int64_t> slots(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) slots[static_cast<size_t>(b)] = b;
  auto ids = at::randint(0, model.config().vocab_size, {batch, fill}, at::kLong);
  model.forward_cached(ids, {}, slots, cache);
  auto step = ids.narrow(1, 0, 1).contiguous();
  const double cached = time_ms(30, [&] {
    model.forward_cached(step, {}, slots, cache);
    for (int64_t b = 0; b < batch; ++b)
      cache.length[static_cast<size_t>(b)] -= 1, cache.next_position[static_cast<size_t>(b)] -= 1;
  });
  const double plain = time_ms(30, [&] { model.forward(step); });
  auto logits = model.forward(step).select(1, 0).contiguous();
  rqat::generation::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<const rqat::generation::SamplingParams*> params(static_cast<size_t>(batch), &greedy);
  std::vector<at::Generator*> gens(static_cast<size_t>(batch), nullptr);
  const double sample = time_ms(100, [&] { rqat::generation::sample_rows(logits, params, gens); });
  std::cout << fmt::format(
      "breakdown at batch {} and {} cached positions: forward_cached {:.3f} ms, plain forward "
      "of the same tokens {:.3f} ms, greedy sampling {:.3f} ms\n",
      batch, fill, cached, plain, sample);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rqat generation benchmark: generated tokens/s of the batched engine"};
  std::string model_dir, prompts_file;
  int64_t max_new_tokens = 128, batch = 0;
  int threads = 1, repeats = 1;
  double temperature = 0;
  bool breakdown = false;
  app.add_option("--model", model_dir, "Model directory")->required();
  app.add_option("--prompts", prompts_file, "JSON file {\"prompts\": [[ids...], ...]}")->required();
  app.add_option("--max-new-tokens", max_new_tokens, "Tokens generated per prompt")
      ->capture_default_str();
  app.add_option("--max-batch", batch, "Engine slots (0: number of prompts)")
      ->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (at::set_num_threads)")->capture_default_str();
  app.add_option("--temperature", temperature, "0 = greedy")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs; the best is reported")->capture_default_str();
  app.add_flag("--breakdown", breakdown,
               "Also time the parts of one decode step at the prompts' batch size");
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(threads);
    auto model = rqat::model::load_causal_lm(model_dir);
    const auto json = rqat::io::read_json_file(prompts_file);
    std::vector<rqat::generation::GenerationRequest> requests;
    for (const auto& p : json.at("prompts")) {
      rqat::generation::GenerationRequest r;
      r.prompt_ids = p.get<std::vector<int32_t>>();
      r.seed = requests.size();
      r.params.temperature = temperature;
      r.params.max_new_tokens = max_new_tokens;
      requests.push_back(std::move(r));
    }
    rqat::generation::EngineOptions options;
    options.max_batch = batch > 0 ? batch : static_cast<int64_t>(requests.size());
    rqat::generation::GenerationEngine engine(*model, nullptr, options);

    auto warm = requests;  // warm-up: allocator, thread pool, first-call paths
    for (auto& r : warm) r.params.max_new_tokens = std::min<int64_t>(8, max_new_tokens);
    engine.generate(warm);

    double best = 0;
    rqat::generation::EngineStats stats;
    for (int i = 0; i < repeats; ++i) {
      engine.generate(requests);
      const auto& s = engine.stats();
      const double rate = static_cast<double>(s.generated_tokens) / s.seconds;
      if (rate > best) {
        best = rate;
        stats = s;
      }
    }
    const double decode_ms = stats.decode_steps > 0
                                 ? 1000.0 * stats.seconds / static_cast<double>(stats.decode_steps)
                                 : 0;
    std::cout << fmt::format(
        "rqat: {} prompts, max_batch {}, {} threads: {} tokens in {:.3f} s = {:.1f} tokens/s "
        "({} decode steps, {:.2f} ms/step incl. prefill)\n",
        requests.size(), options.max_batch, threads, stats.generated_tokens, stats.seconds, best,
        stats.decode_steps, decode_ms);
    std::cout << fmt::format("RESULT tokens_per_s={:.3f}\n", best);
    if (breakdown)
      print_breakdown(*model, static_cast<int64_t>(requests.size()),
                      requests.front().prompt_ids.size(), max_new_tokens);
  } catch (const std::exception& e) {
    std::cerr << "bench_generate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

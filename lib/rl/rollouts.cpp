#include "rl/rollouts.h"

#include <algorithm>

#include "generation/sampler.h"
#include "io/error.h"

namespace rqat::rl {

std::vector<RlPrompt> load_rl_prompts(const std::filesystem::path& data,
                                      const eval::BenchmarkSpec& fields,
                                      const eval::PromptOptions& prompt, size_t max_prompts,
                                      const io::Artifact& model,
                                      const tokenizer::Tokenizer& tokenizer) {
  auto problems = eval::load_benchmark(data, fields);
  if (max_prompts > 0 && max_prompts < problems.size()) problems.resize(max_prompts);
  if (problems.empty()) fail("--data {}: no prompts", data.string());
  std::vector<std::string> texts;
  for (const auto& p : problems) texts.push_back(p.problem);
  bool add_special = true;
  const auto rendered = eval::render_problem_prompts(texts, prompt, model, add_special);
  std::vector<RlPrompt> out;
  for (size_t i = 0; i < problems.size(); ++i) {
    RlPrompt p{problems[i].id, problems[i].problem, problems[i].gold, {}};
    for (auto id : tokenizer.encode(rendered[i], add_special)) p.ids.push_back(id);
    out.push_back(std::move(p));
  }
  return out;
}

data::SequenceSet prompt_sequences(const std::vector<RlPrompt>& prompts) {
  data::SequenceSet set;
  set.layout = data::SequenceLayout::kPacked;
  for (const auto& p : prompts) {
    data::TrainingSequence s;
    s.tokens.assign(p.ids.begin(), p.ids.end());
    s.loss_mask.assign(p.ids.size(), 1);
    set.max_length = std::max<int64_t>(set.max_length, static_cast<int64_t>(p.ids.size()));
    set.sequences.push_back(std::move(s));
  }
  return set;
}

uint64_t mix_seed(uint64_t a, uint64_t b) { return generation::sample_seed(a, b); }

std::vector<Sample> generate_rollouts(model::CausalLM& policy,
                                      std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                      const std::vector<RlPrompt>& prompts,
                                      std::span<const int64_t> prompt_indices, int64_t step,
                                      const RolloutOptions& options) {
  std::vector<generation::GenerationRequest> requests;
  for (const int64_t index : prompt_indices) {
    generation::GenerationRequest r;
    r.prompt_ids = prompts[static_cast<size_t>(index)].ids;
    r.num_samples = options.num_generations;
    r.seed =
        mix_seed(mix_seed(options.seed, static_cast<uint64_t>(step)), static_cast<uint64_t>(index));
    r.params = options.params;
    requests.push_back(std::move(r));
  }
  // The engine samples in eval mode (no dropout); training resumes in train mode.
  policy.eval();
  generation::GenerationEngine engine(policy, std::move(tokenizer), options.engine);
  const auto results = engine.generate(requests);
  policy.train();

  // Results come request by request, sample by sample: group-major, as advantages need.
  std::vector<Sample> samples;
  for (const auto& r : results) {
    Sample s;
    s.prompt = static_cast<size_t>(prompt_indices[r.request_index]);
    s.completion = r.token_ids;
    s.text = r.text;
    s.rollout_logp = r.tempered_logprobs;
    s.truncated = r.finish_reason == generation::FinishReason::kLength;
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace rqat::rl

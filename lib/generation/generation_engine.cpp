// See generation_engine.h. One generate() call:
//   items = every (request, sample) in order, all waiting; pool = the KV blocks of the budget.
//   loop: admit waiting items while blocks and batch places last -> prefill the admitted prompts
//         (and preempted sequences) together, right padded, in chunks -> forks of a prefilled
//         prompt share its blocks -> newly started samples draw their first token from the
//         prompt's last logits -> every running sequence gets room for one more position,
//         preempting the newest when the pool is empty -> one batched one-token forward ->
//         finished samples give their blocks back.
#include "generation/generation_engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <span>

#include "generation/decode_graphs.h"
#include "generation/kv_budget.h"
#include "generation/progress.h"
#include "generation/sampler.h"
#include "generation/stop_strings.h"
#include "io/error.h"
#include "model/paged_step.h"

namespace rqat::generation {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopToken:
      return "stop";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kLength:
      return "length";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// Tokens of one prefill call (rows x positions): bounds activations and the (B, 1, T, keys) mask.
// A GPU takes larger calls: fewer chunks that gather the cached positions again (256 prompts of 512
// tokens are 4 calls there, 16 on the CPU budget).
constexpr int64_t kPrefillTokenBudget = 8192;
constexpr int64_t kPrefillTokenBudgetCuda = 32768;
constexpr int64_t kMinPrefillChunk = 32;

// One (request, sample) from admission to its end; kept across preemption.
struct Sample {
  size_t request = 0;
  int index = 0;
  model::PagedSequence kv;
  int64_t next_input = 0;  // the last drawn token, fed by the next decode step
  StopStringMatcher stops;
  Clock::time_point start;
  bool started = false;  // admitted at least once
};

// A prompt's blocks kept for the request's samples that are not admitted yet.
struct RequestState {
  int waiting = 0;
  int unfinished = 0;
  std::optional<model::PagedSequence> prompt;  // the prefilled prompt (a fork of its blocks)
  at::Tensor last_logits;                      // (vocab) at the prompt's last position
};

void validate(const std::vector<GenerationRequest>& requests, const model::CausalLM& model,
              const tokenizer::Tokenizer* tokenizer, int64_t max_seq_len) {
  const int64_t vocab = model.config().vocab_size;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& req = requests[r];
    if (req.prompt_ids.empty())
      fail("generation request {}: empty prompt (at least one token is needed)", r);
    if (req.num_samples < 1)
      fail("generation request {}: num_samples must be >= 1, got {}", r, req.num_samples);
    for (const auto id : req.prompt_ids) {
      if (id < 0 || id >= vocab)
        fail("generation request {}: prompt token id {} outside the vocabulary [0, {})", r, id,
             vocab);
    }
    try {
      validate_sampling(req.params);
    } catch (const Error& e) {
      fail("generation request {}: {}", r, e.what());
    }
    for (const auto& stop : req.params.stop_strings) {
      if (stop.empty()) fail("generation request {}: empty stop string", r);
    }
    if (!req.params.stop_strings.empty() && tokenizer == nullptr) {
      fail("generation request {}: stop strings need a tokenizer, but the engine has none", r);
    }
    const int64_t prompt = static_cast<int64_t>(req.prompt_ids.size());
    if (max_seq_len > 0 && prompt + req.params.max_new_tokens > max_seq_len) {
      fail("generation request {}: prompt of {} tokens + max_new_tokens {} exceed max_seq_len {}",
           r, prompt, req.params.max_new_tokens, max_seq_len);
    }
  }
}

}  // namespace

GenerationEngine::GenerationEngine(model::CausalLM& model,
                                   std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                   EngineOptions options)
    : model_(model), tokenizer_(std::move(tokenizer)), options_(options) {
  if (options_.max_batch < 1)
    fail("generation: max_batch must be >= 1, got {}", options_.max_batch);
  if (options_.max_seq_len < 0)
    fail("generation: max_seq_len must be >= 0, got {}", options_.max_seq_len);
  if (options_.block_size < 1 || (options_.block_size & (options_.block_size - 1)) != 0)
    fail("generation: --kv-block-size must be a power of two, got {}", options_.block_size);
}

std::vector<GenerationResult> GenerationEngine::generate(
    const std::vector<GenerationRequest>& requests) {
  const auto t0 = Clock::now();
  stats_ = EngineStats{};
  validate(requests, model_, tokenizer_.get(), options_.max_seq_len);
  c10::InferenceMode inference;

  std::vector<Sample> samples;
  std::vector<GenerationResult> results;
  std::vector<RequestState> req_state(requests.size());
  int64_t longest = 0, longest_prompt = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& req = requests[r];
    longest_prompt = std::max(longest_prompt, static_cast<int64_t>(req.prompt_ids.size()));
    longest =
        std::max(longest, static_cast<int64_t>(req.prompt_ids.size()) + req.params.max_new_tokens);
    req_state[r].waiting = req_state[r].unfinished = req.num_samples;
    for (int s = 0; s < req.num_samples; ++s) {
      Sample sample;
      sample.request = r;
      sample.index = s;
      samples.push_back(std::move(sample));
      GenerationResult res;
      res.request_index = r;
      res.sample_index = s;
      results.push_back(std::move(res));
    }
  }
  if (samples.empty()) return results;

  const auto& config = model_.config();
  const auto dtype = model_.options().dtype().toScalarType();
  const c10::Device device = model_.options().device();
  const int64_t block_size = options_.block_size;
  const int64_t blocks_per_sequence = (longest + block_size - 1) / block_size;
  const int64_t concurrent =
      std::min<int64_t>(options_.max_batch, static_cast<int64_t>(samples.size()));
  // By default: every concurrent sequence at its longest, and a prompt kept for samples that wait.
  const int64_t usable = kv_pool_blocks(
      config, dtype, device, {options_.kv_cache_gb, options_.gpu_memory_fraction, block_size},
      concurrent * blocks_per_sequence + (longest_prompt + block_size - 1) / block_size + 1);
  if (usable < blocks_per_sequence) {
    fail(
        "KV cache of {} blocks of {} positions cannot hold one sequence of {} positions (prompt "
        "+ max_new_tokens): raise --kv-cache-gb",
        usable, block_size, longest);
  }
  auto cache = model_.make_paged_cache(usable + 1, block_size);
  stats_.kv_pool_blocks = usable;
  stats_.kv_block_bytes = model::PagedKVCache::block_bytes(config, block_size, dtype);
  stats_.contiguous_kv_bytes = concurrent * longest * (stats_.kv_block_bytes / block_size);

  DecodeGraphs graphs(model_, cache, options_.max_batch, blocks_per_sequence, options_.cuda_graphs);

  std::deque<size_t> waiting;  // sample ids; preempted ones go back to the front
  for (size_t i = 0; i < samples.size(); ++i) waiting.push_back(i);
  std::vector<size_t> running;  // in admission order: the newest is preempted first
  int64_t prompts_done = 0;
  ProgressLine progress(options_.show_progress, static_cast<int64_t>(requests.size()));

  auto note_blocks = [&] {
    stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, cache.blocks_in_use());
  };

  auto drop_prompt = [&](RequestState& rs) {
    if (rs.prompt) cache.release(*rs.prompt);
    rs.prompt.reset();
    rs.last_logits = at::Tensor();
  };

  // Kept prompts are a convenience: dropped first when blocks run short.
  auto drop_kept_prompts = [&] {
    bool dropped = false;
    for (auto& rs : req_state) {
      if (rs.prompt) {
        drop_prompt(rs);
        dropped = true;
      }
    }
    return dropped;
  };

  auto finish = [&](size_t id, FinishReason reason) {
    auto& sample = samples[id];
    auto& res = results[id];
    res.finish_reason = reason;
    res.seconds = std::chrono::duration<double>(Clock::now() - sample.start).count();
    if (tokenizer_) {
      std::span<const int32_t> ids(res.token_ids);
      if (reason == FinishReason::kStopToken) ids = ids.first(ids.size() - 1);
      res.text = tokenizer_->decode(ids, /*skip_special_tokens=*/true);
      const auto& stops = requests[sample.request].params.stop_strings;
      if (!stops.empty()) {
        const size_t cut = find_first_stop(res.text, stops);
        if (cut != std::string::npos) res.text.resize(cut);
      }
    }
    cache.release(sample.kv);
    if (--req_state[sample.request].unfinished == 0) ++prompts_done;
  };

  // Records a drawn token; returns true when the sample finished.
  auto accept = [&](size_t id, const TokenChoice& choice) {
    auto& sample = samples[id];
    auto& res = results[id];
    const auto& params = requests[sample.request].params;
    res.token_ids.push_back(choice.token);
    res.logprobs.push_back(choice.logprob);
    res.tempered_logprobs.push_back(choice.tempered_logprob);
    ++stats_.generated_tokens;
    std::optional<FinishReason> reason;
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), choice.token) !=
        params.stop_token_ids.end()) {
      reason = FinishReason::kStopToken;
    } else if (sample.stops.enabled() &&
               sample.stops.push(tokenizer_->token_bytes(choice.token, true))) {
      reason = FinishReason::kStopString;
    } else if (static_cast<int64_t>(res.token_ids.size()) >= params.max_new_tokens) {
      reason = FinishReason::kLength;
    }
    if (reason) {
      finish(id, *reason);
      return true;
    }
    sample.next_input = choice.token;
    return false;
  };

  // The settings and this step's uniform of each listed sample, on the device.
  auto sampling_of = [&](const std::vector<size_t>& ids) {
    std::vector<const SamplingParams*> params;
    std::vector<double> uniforms;
    for (const size_t id : ids) {
      const auto& sample = samples[id];
      const auto& req = requests[sample.request];
      params.push_back(&req.params);
      uniforms.push_back(sample_uniform(req.seed, static_cast<uint64_t>(sample.index),
                                        results[id].token_ids.size()));
    }
    return sampling_tensors(params, uniforms, device);
  };

  // Records the chosen token of each listed sample; drops finished ones from `running`.
  auto take = [&](const std::vector<size_t>& ids, const ops::SampledTokens& chosen) {
    const auto choices = fetch_choices(chosen, &stats_.host_bytes);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (accept(ids[i], choices[i]))
        running.erase(std::find(running.begin(), running.end(), ids[i]));
    }
  };

  // Prefills rows (sample id, tokens) into their reserved blocks; returns each row's last logits.
  auto prefill = [&](const std::vector<std::pair<size_t, std::vector<int32_t>>>& rows) {
    std::vector<at::Tensor> last(rows.size());
    int64_t most = 0;
    for (const auto& row : rows) most = std::max(most, static_cast<int64_t>(row.second.size()));
    const int64_t chunk = std::max(
        kMinPrefillChunk, (device.is_cuda() ? kPrefillTokenBudgetCuda : kPrefillTokenBudget) /
                              std::max<int64_t>(1, static_cast<int64_t>(rows.size())));
    for (int64_t t = 0; t < most; t += chunk) {
      std::vector<size_t> in_call;
      std::vector<const model::PagedSequence*> seqs;
      std::vector<std::span<const int32_t>> tokens;
      for (size_t i = 0; i < rows.size(); ++i) {
        const auto& ids = rows[i].second;
        const int64_t n = static_cast<int64_t>(ids.size());
        if (t >= n) continue;
        in_call.push_back(i);
        seqs.push_back(&samples[rows[i].first].kv);
        tokens.push_back(std::span<const int32_t>(ids).subspan(
            static_cast<size_t>(t), static_cast<size_t>(std::min(chunk, n - t))));
      }
      const auto step = model::make_paged_step(seqs, tokens, block_size, device);
      const auto logits = model_.forward_paged(step, cache);
      ++stats_.prefill_calls;
      for (size_t j = 0; j < in_call.size(); ++j) {
        const size_t i = in_call[j];
        samples[rows[i].first].kv.length += static_cast<int64_t>(tokens[j].size());
        stats_.prefill_tokens += static_cast<int64_t>(tokens[j].size());
        if (t + static_cast<int64_t>(tokens[j].size()) ==
            static_cast<int64_t>(rows[i].second.size()))
          last[i] = logits[static_cast<int64_t>(j)];
      }
    }
    return last;
  };

  // Evicts the newest running sample: its blocks go back, it waits first in line.
  auto preempt_newest = [&] {
    const size_t id = running.back();
    running.pop_back();
    cache.release(samples[id].kv);
    waiting.push_front(id);
    ++stats_.preemptions;
  };

  while (true) {
    // --- Admission, prefill and first tokens (again while first tokens end samples at once).
    bool admitted_any = true;
    while (admitted_any && !waiting.empty() &&
           static_cast<int64_t>(running.size()) < options_.max_batch) {
      admitted_any = false;
      std::vector<std::pair<size_t, std::vector<int32_t>>> to_prefill;
      std::vector<size_t> fresh;                        // prefilled prompts drawing a first token
      std::vector<std::pair<size_t, size_t>> forks;     // (sample, fresh sample of its prompt)
      std::vector<std::pair<size_t, at::Tensor>> kept;  // forks of a kept prompt, its logits
      while (!waiting.empty() && static_cast<int64_t>(running.size()) < options_.max_batch) {
        const size_t id = waiting.front();
        auto& sample = samples[id];
        const auto& req = requests[sample.request];
        auto& rs = req_state[sample.request];
        auto& res = results[id];
        const bool resumed = sample.started;
        if (!resumed && req.params.max_new_tokens == 0) {
          waiting.pop_front();
          --rs.waiting;
          sample.start = Clock::now();
          finish(id, FinishReason::kLength);
          admitted_any = true;
          continue;
        }
        std::optional<size_t> source;  // a sample of this prompt prefilled in this round
        if (!resumed && options_.share_prompts) {
          for (const size_t f : fresh)
            if (samples[f].request == sample.request) source = f;
        }
        std::vector<int32_t> tokens;
        if (!resumed && options_.share_prompts && rs.prompt) {
          sample.kv = cache.fork(*rs.prompt);  // pinned now: kept prompts may be dropped below
          kept.emplace_back(id, rs.last_logits);
          ++stats_.shared_prompts;
        } else if (source) {
          forks.emplace_back(id, *source);
        } else {
          tokens = req.prompt_ids;
          if (resumed)  // the last generated token is the next decode input
            tokens.insert(tokens.end(), res.token_ids.begin(), res.token_ids.end() - 1);
          // One free block per running sequence stays in reserve, so that an admission does not
          // force the next decode step to preempt at once.
          const int64_t length = static_cast<int64_t>(tokens.size());
          const int64_t headroom = static_cast<int64_t>(running.size());
          const bool first = running.empty();
          auto fits = [&] {
            return cache.blocks_for(length) + (first ? 0 : headroom) <= cache.free_blocks();
          };
          if (!fits() && (!drop_kept_prompts() || !fits())) {
            if (!first) break;
            fail("KV cache: {} free blocks cannot hold a prompt of {} tokens: raise --kv-cache-gb",
                 cache.free_blocks(), length);
          }
          cache.reserve(sample.kv, length);
        }
        waiting.pop_front();
        running.push_back(id);
        admitted_any = true;
        if (resumed) {
          sample.next_input = res.token_ids.back();
          stats_.recomputed_tokens += static_cast<int64_t>(tokens.size());
          to_prefill.emplace_back(id, std::move(tokens));
          continue;
        }
        --rs.waiting;
        sample.started = true;
        sample.start = Clock::now();
        sample.stops =
            StopStringMatcher(req.params.stop_strings.empty() ? nullptr : &req.params.stop_strings);
        if (!tokens.empty()) {
          fresh.push_back(id);
          to_prefill.emplace_back(id, std::move(tokens));
        }
      }
      note_blocks();
      std::vector<size_t> starting;
      std::vector<at::Tensor> rows;
      if (!to_prefill.empty()) {
        const auto last = prefill(to_prefill);
        for (size_t i = 0; i < to_prefill.size(); ++i) {
          const size_t id = to_prefill[i].first;
          if (std::find(fresh.begin(), fresh.end(), id) == fresh.end()) continue;  // resumed
          auto& rs = req_state[samples[id].request];
          starting.push_back(id);
          rows.push_back(last[i]);
          if (options_.share_prompts && rs.waiting > 0 && !rs.prompt) {
            rs.prompt = cache.fork(samples[id].kv);
            rs.last_logits = last[i];
          }
          for (const auto& [fork, from] : forks) {
            if (from != id) continue;
            samples[fork].kv = cache.fork(samples[id].kv);
            starting.push_back(fork);
            rows.push_back(last[i]);
            ++stats_.shared_prompts;
          }
        }
      }
      for (const auto& [id, logits] : kept) {
        starting.push_back(id);
        rows.push_back(logits);
      }
      // First tokens of every newly started sample, from its prompt's last logits.
      if (!starting.empty())
        take(starting, ops::sample_tokens(at::stack(rows), sampling_of(starting)));
      for (auto& rs : req_state) {
        if (rs.waiting == 0 && rs.prompt) drop_prompt(rs);
      }
    }

    if (running.empty()) {
      if (waiting.empty()) break;
      continue;
    }

    // --- Room for one more position per running sequence, oldest first; the newest yield.
    for (size_t i = 0; i < running.size();) {
      auto& kv = samples[running[i]].kv;
      if (cache.reserve(kv, kv.length + 1)) {
        ++i;
        continue;
      }
      if (drop_kept_prompts()) continue;
      preempt_newest();  // possibly this very sequence, when it is the newest
    }
    note_blocks();
    if (running.empty()) continue;

    // --- One decode step over every running sequence.
    std::vector<const model::PagedSequence*> seqs;
    std::vector<std::span<const int32_t>> tokens;
    std::vector<int32_t> inputs;
    inputs.reserve(running.size());
    for (const size_t id : running) inputs.push_back(static_cast<int32_t>(samples[id].next_input));
    for (size_t i = 0; i < running.size(); ++i) {
      seqs.push_back(&samples[running[i]].kv);
      tokens.push_back(std::span<const int32_t>(&inputs[i], 1));
    }
    // Graphs need one block-table width for every step: the longest request's.
    const auto step = model::make_paged_step(seqs, tokens, block_size, device,
                                             graphs.enabled() ? blocks_per_sequence : 0);
    const std::vector<size_t> stepped = running;
    const auto sampling = sampling_of(stepped);
    auto chosen = graphs.run(step, sampling);
    if (!chosen) chosen = decode_and_sample(model_, cache, step, sampling);
    for (const size_t id : running) ++samples[id].kv.length;
    ++stats_.decode_steps;
    stats_.decode_rows += static_cast<int64_t>(running.size());
    take(stepped, *chosen);
    progress.update(prompts_done, stats_.generated_tokens);
  }
  progress.finish(prompts_done, stats_.generated_tokens);
  stats_.graph_captures = graphs.captures();
  stats_.graph_replays = graphs.replays();
  stats_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return results;
}

}  // namespace rqat::generation

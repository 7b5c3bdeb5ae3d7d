// See generation_engine.h. One generate() call:
//   items = every (request, sample) in order, all waiting; pool = the KV blocks of the budget.
//   loop: admit waiting items while blocks and batch places last -> prefill the admitted prompts
//         (and preempted sequences) together, right padded, in chunks -> forks of a prefilled
//         prompt share its blocks -> newly started samples draw their first token from the
//         prompt's last logits -> every running sequence gets room for one more position,
//         preempting the newest when the pool is empty -> one batched one-token forward ->
//         finished samples give their blocks back.
// Scheduler (below) holds one call's state; each step of that loop is one of its methods.
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
  bool started = false;   // admitted at least once
  bool finished = false;  // ended (its result is complete)
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
    for (size_t i = 0; i < req.sample_indices.size(); ++i) {
      const int s = req.sample_indices[i];
      if (s < 0 || s >= req.num_samples || (i > 0 && s <= req.sample_indices[i - 1]))
        fail("generation request {}: sample_indices must increase within [0, {}), got {} at {}",
             r, req.num_samples, s, i);
    }
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

// Sizes over all requests: they fix the pool and the block-table width of decode steps.
struct RunShape {
  int64_t samples = 0;         // (request, sample) pairs
  int64_t longest = 0;         // longest prompt + max_new_tokens
  int64_t longest_prompt = 0;  // longest prompt alone
};

RunShape measure(const std::vector<GenerationRequest>& requests) {
  RunShape shape;
  for (const auto& req : requests) {
    const auto prompt = static_cast<int64_t>(req.prompt_ids.size());
    shape.longest_prompt = std::max(shape.longest_prompt, prompt);
    shape.longest = std::max(shape.longest, prompt + req.params.max_new_tokens);
    shape.samples += static_cast<int64_t>(requested_samples(req).size());
  }
  return shape;
}

struct PoolPlan {
  int64_t blocks_per_sequence = 0;  // blocks of the longest request
  int64_t concurrent = 0;           // sequences that can run together
  int64_t usable = 0;               // blocks handed out (the reserved block 0 not counted)
};

PoolPlan plan_pool(const model::CausalLM& model, const EngineOptions& options,
                   const RunShape& shape) {
  const int64_t block_size = options.block_size;
  PoolPlan plan;
  plan.blocks_per_sequence = (shape.longest + block_size - 1) / block_size;
  plan.concurrent = std::min<int64_t>(options.max_batch, shape.samples);
  // By default: every concurrent sequence at its longest, and a prompt kept for samples that wait.
  plan.usable = kv_pool_blocks(model.config(), model.options().dtype().toScalarType(),
                               model.options().device(),
                               {options.kv_cache_gb, options.gpu_memory_fraction, block_size},
                               plan.concurrent * plan.blocks_per_sequence +
                                   (shape.longest_prompt + block_size - 1) / block_size + 1);
  if (plan.usable < plan.blocks_per_sequence) {
    fail(
        "KV cache of {} blocks of {} positions cannot hold one sequence of {} positions (prompt "
        "+ max_new_tokens): raise --kv-cache-gb",
        plan.usable, block_size, shape.longest);
  }
  return plan;
}

// The pool of the plan (plus block 0, which takes padding writes), with its sizes in the stats.
model::PagedKVCache make_pool(const model::CausalLM& model, int64_t block_size,
                              const PoolPlan& plan, const RunShape& shape, EngineStats& stats) {
  auto cache = model.make_paged_cache(plan.usable + 1, block_size);
  const auto dtype = model.options().dtype().toScalarType();
  stats.kv_pool_blocks = plan.usable;
  stats.kv_block_bytes = model::PagedKVCache::block_bytes(model.config(), block_size, dtype);
  stats.contiguous_kv_bytes = plan.concurrent * shape.longest * (stats.kv_block_bytes / block_size);
  return cache;
}

// One per sample of every request, in (request_index, sample_index) order.
std::vector<Sample> make_samples(const std::vector<GenerationRequest>& requests) {
  std::vector<Sample> samples;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (const int s : requested_samples(requests[r])) {
      Sample sample;
      sample.request = r;
      sample.index = s;
      samples.push_back(std::move(sample));
    }
  }
  return samples;
}

// Empty results, one per sample and in the same order.
std::vector<GenerationResult> make_results(const std::vector<Sample>& samples) {
  std::vector<GenerationResult> results(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    results[i].request_index = samples[i].request;
    results[i].sample_index = samples[i].index;
  }
  return results;
}

std::vector<RequestState> make_request_states(const std::vector<GenerationRequest>& requests) {
  std::vector<RequestState> states(requests.size());
  for (size_t r = 0; r < requests.size(); ++r)
    states[r].waiting = states[r].unfinished =
        static_cast<int>(requested_samples(requests[r]).size());
  return states;
}

// One generate() call's state: the samples, the waiting line and the running batch, the paged pool
// and the decode graphs over it, and the stats it fills. Samples are ids into samples_/results_.
class Scheduler {
 public:
  Scheduler(model::CausalLM& model, const tokenizer::Tokenizer* tokenizer,
            const EngineOptions& options, const std::vector<GenerationRequest>& requests,
            const RunShape& shape, EngineStats& stats, const ResultCallback& on_result)
      : model_(model),
        tokenizer_(tokenizer),
        options_(options),
        requests_(requests),
        stats_(stats),
        device_(model.options().device()),
        samples_(make_samples(requests)),
        results_(make_results(samples_)),
        req_state_(make_request_states(requests)),
        plan_(plan_pool(model, options, shape)),
        cache_(make_pool(model, options.block_size, plan_, shape, stats)),
        graphs_(model, cache_, options.max_batch, plan_.blocks_per_sequence, options.cuda_graphs),
        progress_(options.show_progress, static_cast<int64_t>(requests.size())),
        on_result_(on_result) {
    for (size_t i = 0; i < samples_.size(); ++i) waiting_.push_back(i);
  }

  // Runs every sample to its end; results ordered by (request_index, sample_index).
  std::vector<GenerationResult> run();

 private:
  // What one admission round took from the waiting line, to be prefilled and started together.
  struct Admissions {
    std::vector<std::pair<size_t, std::vector<int32_t>>> to_prefill;  // (sample, tokens)
    std::vector<size_t> fresh;                        // prefilled prompts drawing a first token
    std::vector<std::pair<size_t, size_t>> forks;     // (sample, fresh sample of its prompt)
    std::vector<std::pair<size_t, at::Tensor>> kept;  // forks of a kept prompt, its logits
    bool any = false;  // a sample left the waiting line (admitted, or finished at once)
  };

  bool batch_has_room() const { return static_cast<int64_t>(running_.size()) < options_.max_batch; }
  void admit_and_start();
  void admit_waiting(Admissions& round);
  bool place_kv(size_t id, Admissions& round, std::vector<int32_t>& tokens);
  bool reserve_for_prefill(model::PagedSequence& kv, int64_t length);
  void start_admitted(const Admissions& round);
  std::vector<at::Tensor> prefill(const std::vector<std::pair<size_t, std::vector<int32_t>>>& rows);
  void make_decode_room();
  void decode_step();
  void preempt_newest();
  ops::SamplingTensors sampling_of(const std::vector<size_t>& ids) const;
  void take(const std::vector<size_t>& ids, const ops::SampledTokens& chosen);
  bool accept(size_t id, const TokenChoice& choice);
  void finish(size_t id, FinishReason reason);
  void note_blocks();
  void drop_prompt(RequestState& rs);
  bool drop_kept_prompts();

  model::CausalLM& model_;
  const tokenizer::Tokenizer* tokenizer_;  // may be null: no stop strings, no text
  const EngineOptions& options_;
  const std::vector<GenerationRequest>& requests_;
  EngineStats& stats_;
  const c10::Device device_;
  std::vector<Sample> samples_;
  std::vector<GenerationResult> results_;
  std::vector<RequestState> req_state_;
  const PoolPlan plan_;
  model::PagedKVCache cache_;
  DecodeGraphs graphs_;          // holds cache_ by reference: declared after it
  std::deque<size_t> waiting_;   // sample ids; preempted ones go back to the front
  std::vector<size_t> running_;  // in admission order: the newest is preempted first
  int64_t prompts_done_ = 0;
  ProgressLine progress_;
  const ResultCallback& on_result_;
};

std::vector<GenerationResult> Scheduler::run() {
  while (true) {
    if (options_.stop_requested && options_.stop_requested()) {
      stats_.stopped = true;
      break;
    }
    admit_and_start();
    if (running_.empty()) {
      if (waiting_.empty()) break;
      continue;
    }
    make_decode_room();
    if (running_.empty()) continue;  // every sequence was preempted
    decode_step();
  }
  progress_.finish(prompts_done_, stats_.generated_tokens);
  stats_.graph_captures = graphs_.captures();
  stats_.graph_replays = graphs_.replays();
  if (stats_.stopped) {
    std::vector<GenerationResult> finished;
    for (size_t i = 0; i < results_.size(); ++i)
      if (samples_[i].finished) finished.push_back(std::move(results_[i]));
    return finished;
  }
  return std::move(results_);
}

// Admission, prefill and first tokens; again while first tokens end samples at once (their places
// in the batch come free for the next waiting samples).
void Scheduler::admit_and_start() {
  bool admitted_any = true;
  while (admitted_any && !waiting_.empty() && batch_has_room()) {
    Admissions round;
    admit_waiting(round);
    admitted_any = round.any;
    start_admitted(round);
  }
}

// Takes waiting samples in line order while the batch has places and the pool has blocks.
void Scheduler::admit_waiting(Admissions& round) {
  while (!waiting_.empty() && batch_has_room()) {
    const size_t id = waiting_.front();
    auto& sample = samples_[id];
    const auto& req = requests_[sample.request];
    const bool resumed = sample.started;
    if (!resumed && req.params.max_new_tokens == 0) {  // nothing to generate: ends at admission
      waiting_.pop_front();
      --req_state_[sample.request].waiting;
      sample.start = Clock::now();
      finish(id, FinishReason::kLength);
      round.any = true;
      continue;
    }
    std::vector<int32_t> tokens;  // to prefill; empty when the sample shares a prompt's blocks
    if (!place_kv(id, round, tokens)) break;  // no blocks yet: it stays first in line
    waiting_.pop_front();
    running_.push_back(id);
    round.any = true;
    if (resumed) {
      sample.next_input = results_[id].token_ids.back();
      stats_.recomputed_tokens += static_cast<int64_t>(tokens.size());
      round.to_prefill.emplace_back(id, std::move(tokens));
      continue;
    }
    --req_state_[sample.request].waiting;
    sample.started = true;
    sample.start = Clock::now();
    sample.stops =
        StopStringMatcher(req.params.stop_strings.empty() ? nullptr : &req.params.stop_strings);
    if (!tokens.empty()) {
      round.fresh.push_back(id);
      round.to_prefill.emplace_back(id, std::move(tokens));
    }
  }
}

// Gives an admitted sample its KV: a fork of its prompt's kept blocks, a fork of a sample of its
// prompt prefilled in this round (made after that prefill), or blocks of its own for `tokens`
// (its prompt, and its generated tokens when resumed). False when its own blocks do not fit yet.
bool Scheduler::place_kv(size_t id, Admissions& round, std::vector<int32_t>& tokens) {
  auto& sample = samples_[id];
  const auto& req = requests_[sample.request];
  const auto& rs = req_state_[sample.request];
  const bool resumed = sample.started;
  const bool share = !resumed && options_.share_prompts;
  std::optional<size_t> source;  // a sample of this prompt prefilled in this round
  if (share) {
    for (const size_t f : round.fresh)
      if (samples_[f].request == sample.request) source = f;
  }
  if (share && rs.prompt) {
    sample.kv = cache_.fork(*rs.prompt);  // pinned now: kept prompts may be dropped below
    round.kept.emplace_back(id, rs.last_logits);
    ++stats_.shared_prompts;
    return true;
  }
  if (source) {
    round.forks.emplace_back(id, *source);
    return true;
  }
  tokens = req.prompt_ids;
  if (resumed)  // the last generated token is the next decode input
    tokens.insert(tokens.end(), results_[id].token_ids.begin(), results_[id].token_ids.end() - 1);
  return reserve_for_prefill(sample.kv, static_cast<int64_t>(tokens.size()));
}

// One free block per running sequence stays in reserve, so that an admission does not force the
// next decode step to preempt at once. Kept prompts give way first. A sequence that cannot fit
// into an otherwise empty batch never will: that is an error, not a wait.
bool Scheduler::reserve_for_prefill(model::PagedSequence& kv, int64_t length) {
  const int64_t headroom = static_cast<int64_t>(running_.size());
  const bool first = running_.empty();
  auto fits = [&] {
    return cache_.blocks_for(length) + (first ? 0 : headroom) <= cache_.free_blocks();
  };
  if (!fits() && (!drop_kept_prompts() || !fits())) {
    if (!first) return false;
    fail("KV cache: {} free blocks cannot hold a prompt of {} tokens: raise --kv-cache-gb",
         cache_.free_blocks(), length);
  }
  cache_.reserve(kv, length);
  return true;
}

// Prefills the round's rows, shares each fresh prompt with its forks (and keeps it for samples
// still waiting), then draws the first token of every newly started sample from its prompt's last
// logits. Resumed samples only get their cache back: their next input is already known.
void Scheduler::start_admitted(const Admissions& round) {
  note_blocks();
  std::vector<size_t> starting;
  std::vector<at::Tensor> rows;  // the last prompt logits each starting sample draws from
  if (!round.to_prefill.empty()) {
    const auto last = prefill(round.to_prefill);
    for (size_t i = 0; i < round.to_prefill.size(); ++i) {
      const size_t id = round.to_prefill[i].first;
      if (std::find(round.fresh.begin(), round.fresh.end(), id) == round.fresh.end()) continue;
      auto& rs = req_state_[samples_[id].request];
      starting.push_back(id);
      rows.push_back(last[i]);
      if (options_.share_prompts && rs.waiting > 0 && !rs.prompt) {
        rs.prompt = cache_.fork(samples_[id].kv);
        rs.last_logits = last[i];
      }
      for (const auto& [fork, from] : round.forks) {
        if (from != id) continue;
        samples_[fork].kv = cache_.fork(samples_[id].kv);
        starting.push_back(fork);
        rows.push_back(last[i]);
        ++stats_.shared_prompts;
      }
    }
  }
  for (const auto& [id, logits] : round.kept) {
    starting.push_back(id);
    rows.push_back(logits);
  }
  if (!starting.empty()) take(starting, ops::sample_tokens(at::stack(rows), sampling_of(starting)));
  for (auto& rs : req_state_) {
    if (rs.waiting == 0 && rs.prompt) drop_prompt(rs);  // no sample of it waits any more
  }
}

// Prefills rows (sample id, tokens) into their reserved blocks, right padded, in chunks that keep
// one call within the token budget; returns each row's last logits.
std::vector<at::Tensor> Scheduler::prefill(
    const std::vector<std::pair<size_t, std::vector<int32_t>>>& rows) {
  std::vector<at::Tensor> last(rows.size());
  int64_t most = 0;
  for (const auto& row : rows) most = std::max(most, static_cast<int64_t>(row.second.size()));
  const int64_t chunk = std::max(
      kMinPrefillChunk, (device_.is_cuda() ? kPrefillTokenBudgetCuda : kPrefillTokenBudget) /
                            std::max<int64_t>(1, static_cast<int64_t>(rows.size())));
  for (int64_t t = 0; t < most; t += chunk) {
    std::vector<size_t> in_call;  // rows with tokens left at t
    std::vector<const model::PagedSequence*> seqs;
    std::vector<std::span<const int32_t>> tokens;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& ids = rows[i].second;
      const int64_t n = static_cast<int64_t>(ids.size());
      if (t >= n) continue;
      in_call.push_back(i);
      seqs.push_back(&samples_[rows[i].first].kv);
      tokens.push_back(std::span<const int32_t>(ids).subspan(
          static_cast<size_t>(t), static_cast<size_t>(std::min(chunk, n - t))));
    }
    const auto step = model::make_paged_step(seqs, tokens, options_.block_size, device_);
    const auto logits = model_.forward_paged(step, cache_);
    ++stats_.prefill_calls;
    for (size_t j = 0; j < in_call.size(); ++j) {
      const size_t i = in_call[j];
      samples_[rows[i].first].kv.length += static_cast<int64_t>(tokens[j].size());
      stats_.prefill_tokens += static_cast<int64_t>(tokens[j].size());
      if (t + static_cast<int64_t>(tokens[j].size()) == static_cast<int64_t>(rows[i].second.size()))
        last[i] = logits[static_cast<int64_t>(j)];
    }
  }
  return last;
}

// Room for one more position per running sequence, oldest first; when the pool is empty, kept
// prompts go first, then the newest sequences yield.
void Scheduler::make_decode_room() {
  for (size_t i = 0; i < running_.size();) {
    auto& kv = samples_[running_[i]].kv;
    if (cache_.reserve(kv, kv.length + 1)) {
      ++i;
      continue;
    }
    if (drop_kept_prompts()) continue;
    preempt_newest();  // possibly this very sequence, when it is the newest
  }
  note_blocks();
}

// One batched one-token forward over every running sequence, through a graph when one is there.
void Scheduler::decode_step() {
  std::vector<const model::PagedSequence*> seqs;
  std::vector<std::span<const int32_t>> tokens;
  std::vector<int32_t> inputs;
  inputs.reserve(running_.size());
  for (const size_t id : running_) inputs.push_back(static_cast<int32_t>(samples_[id].next_input));
  for (size_t i = 0; i < running_.size(); ++i) {
    seqs.push_back(&samples_[running_[i]].kv);
    tokens.push_back(std::span<const int32_t>(&inputs[i], 1));
  }
  // Graphs need one block-table width for every step: the longest request's.
  const auto step = model::make_paged_step(seqs, tokens, options_.block_size, device_,
                                           graphs_.enabled() ? plan_.blocks_per_sequence : 0);
  const std::vector<size_t> stepped = running_;  // take() drops finished ones from running_
  const auto sampling = sampling_of(stepped);
  auto chosen = graphs_.run(step, sampling);
  if (!chosen) chosen = decode_and_sample(model_, cache_, step, sampling);
  for (const size_t id : running_) ++samples_[id].kv.length;
  ++stats_.decode_steps;
  stats_.decode_rows += static_cast<int64_t>(running_.size());
  take(stepped, *chosen);
  progress_.update(prompts_done_, stats_.generated_tokens);
}

// Evicts the newest running sample: its blocks go back, it waits first in line, to be recomputed.
void Scheduler::preempt_newest() {
  const size_t id = running_.back();
  running_.pop_back();
  cache_.release(samples_[id].kv);
  waiting_.push_front(id);
  ++stats_.preemptions;
}

// The settings and this step's uniform of each listed sample, on the device. The uniform is keyed
// by the token's position, so a sample's draws do not depend on its batch.
ops::SamplingTensors Scheduler::sampling_of(const std::vector<size_t>& ids) const {
  std::vector<const SamplingParams*> params;
  std::vector<double> uniforms;
  for (const size_t id : ids) {
    const auto& sample = samples_[id];
    const auto& req = requests_[sample.request];
    params.push_back(&req.params);
    uniforms.push_back(sample_uniform(req.seed, static_cast<uint64_t>(sample.index),
                                      results_[id].token_ids.size()));
  }
  return sampling_tensors(params, uniforms, device_);
}

// Records the chosen token of each listed sample; drops finished ones from running_.
void Scheduler::take(const std::vector<size_t>& ids, const ops::SampledTokens& chosen) {
  const auto choices = fetch_choices(chosen, &stats_.host_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (accept(ids[i], choices[i]))
      running_.erase(std::find(running_.begin(), running_.end(), ids[i]));
  }
}

// Records a drawn token; returns true when the sample finished (stop token, stop string, length).
bool Scheduler::accept(size_t id, const TokenChoice& choice) {
  auto& sample = samples_[id];
  auto& res = results_[id];
  const auto& params = requests_[sample.request].params;
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
}

// Ends a sample: its text (without the stop token, cut at the first stop string), its time, and
// its blocks back to the pool.
void Scheduler::finish(size_t id, FinishReason reason) {
  auto& sample = samples_[id];
  auto& res = results_[id];
  sample.finished = true;
  res.finish_reason = reason;
  res.seconds = std::chrono::duration<double>(Clock::now() - sample.start).count();
  if (tokenizer_)
    res.text = completion_text(*tokenizer_, res.token_ids, reason,
                               requests_[sample.request].params.stop_strings);
  cache_.release(sample.kv);
  if (--req_state_[sample.request].unfinished == 0) ++prompts_done_;
  if (on_result_) on_result_(res);
}

void Scheduler::note_blocks() {
  stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, cache_.blocks_in_use());
}

void Scheduler::drop_prompt(RequestState& rs) {
  if (rs.prompt) cache_.release(*rs.prompt);
  rs.prompt.reset();
  rs.last_logits = at::Tensor();
}

// Kept prompts are a convenience: dropped first when blocks run short. True when any was dropped.
bool Scheduler::drop_kept_prompts() {
  bool dropped = false;
  for (auto& rs : req_state_) {
    if (rs.prompt) {
      drop_prompt(rs);
      dropped = true;
    }
  }
  return dropped;
}

}  // namespace

std::string completion_text(const tokenizer::Tokenizer& tokenizer,
                            const std::vector<int32_t>& token_ids, FinishReason reason,
                            const std::vector<std::string>& stop_strings) {
  std::span<const int32_t> ids(token_ids);
  if (reason == FinishReason::kStopToken && !ids.empty()) ids = ids.first(ids.size() - 1);
  std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/true);
  if (!stop_strings.empty()) {
    const size_t cut = find_first_stop(text, stop_strings);
    if (cut != std::string::npos) text.resize(cut);
  }
  return text;
}

std::vector<int> requested_samples(const GenerationRequest& request) {
  if (!request.sample_indices.empty()) return request.sample_indices;
  std::vector<int> all(static_cast<size_t>(std::max(request.num_samples, 0)));
  for (size_t s = 0; s < all.size(); ++s) all[s] = static_cast<int>(s);
  return all;
}

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
    const std::vector<GenerationRequest>& requests, const ResultCallback& on_result) {
  const auto t0 = Clock::now();
  stats_ = EngineStats{};
  validate(requests, model_, tokenizer_.get(), options_.max_seq_len);
  c10::InferenceMode inference;  // before the pool: its tensors are inference tensors
  const RunShape shape = measure(requests);
  if (shape.samples == 0) return {};
  Scheduler scheduler(model_, tokenizer_.get(), options_, requests, shape, stats_, on_result);
  auto results = scheduler.run();
  stats_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return results;
}

}  // namespace rqat::generation

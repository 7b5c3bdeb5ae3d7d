// See generation_engine.h. One generate() call:
//   items = every (request, sample) in order; cache = max_batch slots of max_seq_len positions.
//   loop: admit waiting items into free slots -> prompts not in the cache yet are prefilled
//   together
//         (left padded, in chunks that bound the (B, T, vocab) logits) -> the other samples of a
//         request copy the prompt's cache rows from a slot that holds it -> each admitted sample
//         draws its first token from the prompt's last logits -> all active slots decode one token
//         in one batched T = 1 forward -> finished samples free their slots for the next admission.
#include "generation/generation_engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

#include "generation/progress.h"
#include "generation/sampler.h"
#include "generation/stop_strings.h"
#include "io/error.h"

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

// Long prompts are prefilled in chunks of positions so that the activations and the (B, 1, T, keys)
// attention mask of one call stay bounded; the budget counts rows x chunk x vocab floats, the size
// the full-position logits would have (only the last position's are computed).
constexpr int64_t kPrefillLogitBudget = int64_t{64} << 20;
constexpr int64_t kMinPrefillChunk = 32;

struct Item {
  size_t request;
  int sample;
};

struct Slot {
  bool active = false;
  size_t result = 0;
  size_t request = 0;
  int64_t prompt_positions = 0;  // cache positions of the prompt, left padding included
  int64_t next_input = 0;        // the last drawn token, fed by the next decode step
  at::Generator gen;
  StopStringMatcher stops;
  Clock::time_point start;
};

struct RequestState {
  int waiting = 0;         // samples not admitted yet
  int unfinished = 0;      // samples not finished yet
  at::Tensor last_logits;  // (vocab): the prompt's last position, kept while samples wait
  int64_t donor = -1;      // an active slot whose first prompt_positions cache rows hold the prompt
};

void validate(const std::vector<GenerationRequest>& requests, const model::CausalLM& model,
              const tokenizer::Tokenizer* tokenizer) {
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
  }
}

void copy_prompt_rows(model::KVCache& cache, int64_t src, int64_t dst, int64_t positions,
                      int64_t next_position) {
  for (size_t l = 0; l < cache.keys.size(); ++l) {
    cache.keys[l][dst].narrow(1, 0, positions).copy_(cache.keys[l][src].narrow(1, 0, positions));
    cache.values[l][dst]
        .narrow(1, 0, positions)
        .copy_(cache.values[l][src].narrow(1, 0, positions));
  }
  cache.valid[dst].narrow(0, 0, positions).copy_(cache.valid[src].narrow(0, 0, positions));
  cache.length[dst] = positions;
  cache.next_position[dst] = next_position;
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
}

std::vector<GenerationResult> GenerationEngine::generate(
    const std::vector<GenerationRequest>& requests) {
  const auto t0 = Clock::now();
  stats_ = EngineStats{};
  validate(requests, model_, tokenizer_.get());
  c10::InferenceMode inference;

  // Items, results and per-request state.
  std::vector<Item> items;
  std::vector<GenerationResult> results;
  std::vector<RequestState> req_state(requests.size());
  int64_t capacity = options_.max_seq_len;
  int64_t needed = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& req = requests[r];
    const int64_t prompt = static_cast<int64_t>(req.prompt_ids.size());
    needed = std::max(needed, prompt + req.params.max_new_tokens);
    if (options_.max_seq_len > 0 && prompt + req.params.max_new_tokens > options_.max_seq_len) {
      fail("generation request {}: prompt of {} tokens + max_new_tokens {} exceed max_seq_len {}",
           r, prompt, req.params.max_new_tokens, options_.max_seq_len);
    }
    req_state[r].waiting = req_state[r].unfinished = req.num_samples;
    for (int s = 0; s < req.num_samples; ++s) {
      items.push_back({r, s});
      GenerationResult res;
      res.request_index = r;
      res.sample_index = s;
      results.push_back(std::move(res));
    }
  }
  if (items.empty()) return results;
  if (capacity == 0) capacity = needed;

  const int64_t num_slots =
      std::min<int64_t>(options_.max_batch, static_cast<int64_t>(items.size()));
  model::KVCache cache = model_.make_cache(num_slots, capacity);
  const c10::Device device = model_.options().device();
  const int64_t vocab = model_.config().vocab_size;

  std::vector<Slot> slots(static_cast<size_t>(num_slots));
  std::vector<int64_t> free_slots;  // kept descending, so back() is the lowest free slot
  for (int64_t s = num_slots - 1; s >= 0; --s) free_slots.push_back(s);

  int64_t prompts_done = 0;
  ProgressLine progress(options_.show_progress, static_cast<int64_t>(requests.size()));

  auto finish_request_sample = [&](size_t r) {
    if (--req_state[r].unfinished == 0) ++prompts_done;
  };

  auto finalize = [&](GenerationResult& res, FinishReason reason, Clock::time_point start) {
    res.finish_reason = reason;
    res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (tokenizer_) {
      std::span<const int32_t> ids(res.token_ids);
      if (reason == FinishReason::kStopToken) ids = ids.first(ids.size() - 1);
      res.text = tokenizer_->decode(ids, /*skip_special_tokens=*/true);
      const auto& stops = requests[res.request_index].params.stop_strings;
      if (!stops.empty()) {
        const size_t cut = find_first_stop(res.text, stops);
        if (cut != std::string::npos) res.text.resize(cut);
      }
    }
    finish_request_sample(res.request_index);
  };

  auto release = [&](int64_t s) {
    auto& slot = slots[static_cast<size_t>(s)];
    slot.active = false;
    cache.reset_slot(s);
    auto& rs = req_state[slot.request];
    if (rs.donor == s) {
      rs.donor = -1;
      for (int64_t o = 0; o < num_slots; ++o) {
        const auto& other = slots[static_cast<size_t>(o)];
        if (other.active && other.request == slot.request) {
          rs.donor = o;
          break;
        }
      }
    }
    free_slots.insert(std::upper_bound(free_slots.begin(), free_slots.end(), s, std::greater<>()),
                      s);
  };

  // Records a drawn token; returns true when the sample finished (its slot is then released).
  auto accept = [&](int64_t s, const TokenChoice& choice) {
    auto& slot = slots[static_cast<size_t>(s)];
    auto& res = results[slot.result];
    const auto& params = requests[slot.request].params;
    res.token_ids.push_back(choice.token);
    res.logprobs.push_back(choice.logprob);
    res.tempered_logprobs.push_back(choice.tempered_logprob);
    ++stats_.generated_tokens;
    std::optional<FinishReason> reason;
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), choice.token) !=
        params.stop_token_ids.end()) {
      reason = FinishReason::kStopToken;
    } else if (slot.stops.enabled() &&
               slot.stops.push(tokenizer_->token_bytes(choice.token, true))) {
      reason = FinishReason::kStopString;
    } else if (static_cast<int64_t>(res.token_ids.size()) >= params.max_new_tokens ||
               cache.length[s] >= capacity) {
      reason = FinishReason::kLength;
    }
    if (reason) {
      finalize(res, *reason, slot.start);
      release(s);
      return true;
    }
    slot.next_input = choice.token;
    return false;
  };

  size_t next_item = 0;
  std::vector<int64_t> active;
  std::vector<int64_t> step_ids;
  std::vector<const SamplingParams*> step_params;
  std::vector<at::Generator*> step_gens;

  while (true) {
    // --- Admission: waiting items into free slots (again while first tokens end samples at once).
    while (next_item < items.size() && !free_slots.empty()) {
      std::vector<int64_t> admitted;
      while (next_item < items.size() && !free_slots.empty()) {
        const Item item = items[next_item++];
        const auto& req = requests[item.request];
        auto& rs = req_state[item.request];
        --rs.waiting;
        auto& res = results[next_item - 1];
        if (req.params.max_new_tokens == 0) {
          finalize(res, FinishReason::kLength, Clock::now());
          continue;
        }
        const int64_t s = free_slots.back();
        free_slots.pop_back();
        auto& slot = slots[static_cast<size_t>(s)];
        slot.active = true;
        slot.result = next_item - 1;
        slot.request = item.request;
        slot.gen = make_sample_generator(req.seed, static_cast<uint64_t>(item.sample));
        slot.stops =
            StopStringMatcher(req.params.stop_strings.empty() ? nullptr : &req.params.stop_strings);
        slot.start = Clock::now();
        admitted.push_back(s);
      }

      if (!admitted.empty()) {
        // Which admitted slots need a prefill: the first admitted slot of a request with no prompt
        // in the cache; the others copy from a donor.
        std::vector<int64_t> to_prefill;
        std::vector<std::pair<int64_t, int64_t>> copies;  // (dst, src request)
        for (const int64_t s : admitted) {
          const size_t r = slots[static_cast<size_t>(s)].request;
          auto& rs = req_state[r];
          if (rs.donor >= 0) {  // in the cache already, or prefilled below
            copies.emplace_back(s, static_cast<int64_t>(r));
          } else {
            rs.donor = s;
            to_prefill.push_back(s);
          }
        }

        // Prefill in groups whose padded length still leaves each member its max_new_tokens.
        size_t begin = 0;
        while (begin < to_prefill.size()) {
          size_t end = begin;
          int64_t longest = 0, most_new = 0;
          while (end < to_prefill.size()) {
            const auto& req = requests[slots[static_cast<size_t>(to_prefill[end])].request];
            const int64_t len = static_cast<int64_t>(req.prompt_ids.size());
            const int64_t l2 = std::max(longest, len),
                          n2 = std::max(most_new, req.params.max_new_tokens);
            if (end > begin && l2 + n2 > capacity) break;
            longest = l2;
            most_new = n2;
            ++end;
          }
          const int64_t rows = static_cast<int64_t>(end - begin);
          auto ids = at::zeros({rows, longest}, at::kLong);
          auto mask = at::zeros({rows, longest}, at::kLong);
          std::vector<int64_t> group_slots;
          for (int64_t b = 0; b < rows; ++b) {
            const int64_t s = to_prefill[begin + static_cast<size_t>(b)];
            const auto& prompt = requests[slots[static_cast<size_t>(s)].request].prompt_ids;
            const int64_t len = static_cast<int64_t>(prompt.size());
            auto row = ids[b].narrow(0, longest - len, len);
            row.copy_(at::from_blob(const_cast<int32_t*>(prompt.data()), {len}, at::kInt));
            mask[b].narrow(0, longest - len, len).fill_(1);
            group_slots.push_back(s);
            stats_.prefill_tokens += len;
          }
          ids = ids.to(device);
          mask = mask.to(device);
          const int64_t chunk =
              std::max(kMinPrefillChunk, kPrefillLogitBudget / std::max<int64_t>(1, rows * vocab));
          at::Tensor last;
          for (int64_t t = 0; t < longest; t += chunk) {
            const int64_t n = std::min(chunk, longest - t);
            auto logits = model_.forward_cached(ids.narrow(1, t, n), mask.narrow(1, t, n),
                                                group_slots, cache, /*last_only=*/true);
            ++stats_.prefill_calls;
            if (t + n == longest) last = logits.select(1, 0);
          }
          for (int64_t b = 0; b < rows; ++b) {
            const int64_t s = group_slots[static_cast<size_t>(b)];
            auto& slot = slots[static_cast<size_t>(s)];
            slot.prompt_positions = cache.length[s];
            req_state[slot.request].last_logits = last[b].clone();
          }
          begin = end;
        }

        for (const auto& [dst, r] : copies) {
          const auto& rs = req_state[static_cast<size_t>(r)];
          const auto& donor = slots[static_cast<size_t>(rs.donor)];
          copy_prompt_rows(
              cache, rs.donor, dst, donor.prompt_positions,
              static_cast<int64_t>(requests[static_cast<size_t>(r)].prompt_ids.size()));
          slots[static_cast<size_t>(dst)].prompt_positions = donor.prompt_positions;
          ++stats_.prefix_copies;
        }

        // First tokens from the prompts' last logits, all admitted samples at once.
        std::vector<at::Tensor> rows;
        step_params.clear();
        step_gens.clear();
        for (const int64_t s : admitted) {
          auto& slot = slots[static_cast<size_t>(s)];
          rows.push_back(req_state[slot.request].last_logits);
          step_params.push_back(&requests[slot.request].params);
          step_gens.push_back(&slot.gen);
        }
        const auto choices = sample_rows(at::stack(rows), step_params, step_gens);
        for (size_t i = 0; i < admitted.size(); ++i) accept(admitted[i], choices[i]);
        for (auto& rs : req_state) {
          if (rs.waiting == 0 && rs.last_logits.defined()) rs.last_logits = at::Tensor();
        }
      }
    }

    // --- One decode step over every active slot.
    active.clear();
    for (int64_t s = 0; s < num_slots; ++s) {
      if (slots[static_cast<size_t>(s)].active) active.push_back(s);
    }
    if (active.empty()) {
      if (next_item >= items.size()) break;
      continue;
    }
    step_ids.clear();
    step_params.clear();
    step_gens.clear();
    for (const int64_t s : active) {
      auto& slot = slots[static_cast<size_t>(s)];
      step_ids.push_back(slot.next_input);
      step_params.push_back(&requests[slot.request].params);
      step_gens.push_back(&slot.gen);
    }
    const int64_t batch = static_cast<int64_t>(active.size());
    auto ids =
        at::from_blob(step_ids.data(), {batch, 1}, at::kLong).to(device);  // no copy on the CPU
    auto logits = model_.forward_cached(ids, at::Tensor(), active, cache);
    ++stats_.decode_steps;
    stats_.decode_rows += batch;
    const auto choices = sample_rows(logits.select(1, 0), step_params, step_gens);
    for (int64_t b = 0; b < batch; ++b)
      accept(active[static_cast<size_t>(b)], choices[static_cast<size_t>(b)]);
    progress.update(prompts_done, stats_.generated_tokens);
  }
  progress.finish(prompts_done, stats_.generated_tokens);
  stats_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return results;
}

}  // namespace rqat::generation

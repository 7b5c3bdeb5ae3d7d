// See decode_graphs.h.
#include "generation/decode_graphs.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"

#ifdef RQAT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace rqat::generation {

ops::SampledTokens decode_and_sample(model::CausalLM& model, model::PagedKVCache& cache,
                                     const model::PagedStep& step,
                                     const ops::SamplingTensors& sampling) {
  return ops::sample_tokens(model.forward_paged(step, cache), sampling);
}

#ifdef RQAT_WITH_CUDA

// Static buffers of one bucket and its graph.
struct DecodeGraphs::Bucket {
  int64_t rows = 0;
  model::PagedStep step;          // (rows, 1) inputs, (rows, max_blocks) tables
  ops::SamplingTensors sampling;  // (rows) settings
  ops::SampledTokens out;         // (rows) results, written by each replay
  at::cuda::CUDAGraph graph;
  bool captured = false;
};

namespace {

using Clock = std::chrono::steady_clock;

// Ends a capture that threw midway, on its capturing stream (the current one), so that neither
// the stream nor the caching allocator stays in capture mode once the graph is destroyed: an
// allocator still routing this stream's allocations to the freed graph's pool is a use after free
// that surfaces anywhere later (issue 43: a packed decode crashed through a null pointer there).
void abandon_capture(at::cuda::CUDAGraph& graph, c10::DeviceIndex device) {
  try {
    graph.capture_end();  // ends the stream's capture, then the allocator's pool routing
    return;
  } catch (const std::exception&) {
    // An invalidated capture fails at cudaStreamEndCapture, before the allocator is told.
  }
  cudaGraph_t abandoned = nullptr;
  if (cudaStreamEndCapture(c10::cuda::getCurrentCUDAStream().stream(), &abandoned) == cudaSuccess &&
      abandoned != nullptr)
    cudaGraphDestroy(abandoned);
  (void)cudaGetLastError();  // the stream had no capture left: not an error for later calls
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, graph.pool());
  } catch (const std::exception&) {
    // capture_end got as far as ending the routing itself.
  }
}

// dst[0, n) = src, dst[n, rows) = fill: real rows in, padding rows harmless.
void load(at::Tensor& dst, const at::Tensor& src, double fill) {
  const int64_t n = src.size(0);
  dst.narrow(0, 0, n).copy_(src, /*non_blocking=*/true);
  if (n < dst.size(0)) dst.narrow(0, n, dst.size(0) - n).fill_(fill);
}

}  // namespace

DecodeGraphs::DecodeGraphs(model::CausalLM& model, model::PagedKVCache& cache, int64_t max_batch,
                           int64_t max_blocks, bool enabled)
    : model_(model),
      cache_(cache),
      max_batch_(max_batch),
      max_blocks_(max_blocks),
      enabled_(enabled && model.options().device().is_cuda() &&
               ops::use_custom_kernel(ops::Kernel::kCudaGraphs, model.options().device())) {}

DecodeGraphs::~DecodeGraphs() = default;

void DecodeGraphs::disable(const std::string& why) {
  if (enabled_ && !why.empty())
    std::cerr << "generation: CUDA graphs off, decoding eagerly: " << why << "\n";
  enabled_ = false;
  buckets_.clear();
}

// Graphs off for good: in auto the failed check goes to the kernel choice (one warning line, and no
// later engine of the process tries graphs on this device); otherwise one line here.
void DecodeGraphs::give_up(const ops::KernelCheck& check) {
  if (ops::kernel_mode() == ops::KernelMode::kAuto) {
    ops::record_kernel_check(ops::Kernel::kCudaGraphs, model_.options().device(), check);
    disable("");
  } else {
    disable(check.failure.empty() ? "the captured step chose other tokens than the eager step"
                                  : check.failure);
  }
}

// The test-only fault hook (ops/kernel_choice.h): a replay hands out the next ids.
void DecodeGraphs::perturb_if_faulty(ops::SampledTokens& out) const {
  if (ops::kernel_fault(ops::Kernel::kCudaGraphs))
    out.token.add_(1).remainder_(model_.config().vocab_size);
}

std::optional<ops::SampledTokens> DecodeGraphs::run(const model::PagedStep& step,
                                                    const ops::SamplingTensors& sampling) {
  if (!enabled_) return std::nullopt;
  const int64_t rows = step.input_ids.size(0);
  if (step.input_ids.size(1) != 1 || step.block_tables.size(1) != max_blocks_ || rows > max_batch_)
    return std::nullopt;
  // Buckets by size and by whether every row is greedy (a greedy graph skips the filters' sort).
  size_t index = sampling.all_greedy ? 1 : 0;
  int64_t size = 1;
  while (size < rows) size *= 2, index += 2;
  size = std::min(size, std::max<int64_t>(max_batch_, 1));
  if (buckets_.size() <= index) buckets_.resize(index + 1);
  auto& bucket = buckets_[index];
  const bool first_use = !bucket;
  if (first_use) {
    bucket = std::make_unique<Bucket>();
    bucket->rows = size;
    const auto opts = step.input_ids.options();
    auto& s = bucket->step;
    s.input_ids = at::zeros({size, 1}, opts);
    s.positions = at::zeros({size, 1}, opts);
    s.slot_mapping = at::zeros({size}, opts);
    s.block_tables = at::zeros({size, max_blocks_}, opts.dtype(at::kInt));
    s.context_lens = at::ones({size}, opts.dtype(at::kInt));
    s.last_index = at::zeros({size}, opts);
    s.fresh_sequences = false;
    auto& g = bucket->sampling;
    g.inv_temperature = at::ones({size}, opts.dtype(at::kFloat));
    g.greedy = at::ones({size}, opts.dtype(at::kBool));
    g.top_k = at::zeros({size}, opts);
    g.top_p = at::ones({size}, opts.dtype(at::kDouble));
    g.min_p = at::zeros({size}, opts.dtype(at::kDouble));
    g.uniform = at::zeros({size}, opts.dtype(at::kDouble));
    g.all_greedy = sampling.all_greedy;
  }
  auto& s = bucket->step;
  // The rotary table must not grow inside a graph: the static step names the largest position.
  s.max_position = max_blocks_ * cache_.block_size() - 1;
  s.max_context = max_blocks_ * cache_.block_size();
  load(s.input_ids, step.input_ids, 0);
  load(s.positions, step.positions, 0);
  load(s.slot_mapping, step.slot_mapping, 0);  // padding rows write into block 0
  load(s.block_tables, step.block_tables, 0);
  load(s.context_lens, step.context_lens, 1);
  auto& g = bucket->sampling;
  load(g.inv_temperature, sampling.inv_temperature, 1);
  load(g.greedy, sampling.greedy, 1);
  load(g.top_k, sampling.top_k, 0);
  load(g.top_p, sampling.top_p, 1);
  load(g.min_p, sampling.min_p, 0);
  load(g.uniform, sampling.uniform, 0);

  if (first_use) {
    // Eager first (also the warm-up capture needs), then capture on a side stream, replay, compare.
    // All buckets allocate from one memory pool (the first captured bucket's).
    const auto started = Clock::now();
    at::cuda::MempoolId_t pool{0, 0};
    for (const auto& other : buckets_)
      if (other && other->captured) pool = other->graph.pool();
    ops::SampledTokens eager;
    try {
      // The side stream starts after the inputs above are loaded, and the step's user after it.
      auto current = c10::cuda::getCurrentCUDAStream();
      auto side = c10::cuda::getStreamFromPool();
      at::cuda::CUDAEvent loaded;
      loaded.record(current);
      loaded.block(side);
      {
        // Warm-up (cuBLAS handles, workspaces) and capture on the same side stream, as torch asks.
        c10::cuda::CUDAStreamGuard guard(side);
        eager = decode_and_sample(model_, cache_, s, g);
        bucket->graph.capture_begin(pool);
        try {
          bucket->out = decode_and_sample(model_, cache_, s, g);
        } catch (...) {
          abandon_capture(bucket->graph, side.device_index());
          throw;
        }
        bucket->graph.capture_end();
      }
      at::cuda::CUDAEvent captured;
      captured.record(side);
      captured.block(current);
      bucket->captured = true;
      ++captures_;
      bucket->graph.replay();
      perturb_if_faulty(bucket->out);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      ops::KernelCheck check;
      check.passed = false;
      check.cases = 1;
      check.worst_case = fmt::format("capture of the decode step for a bucket of {} rows", size);
      check.failure = "capture failed: " + what.substr(0, what.find('\n'));
      give_up(check);
      if (eager.token.defined())
        return ops::SampledTokens{eager.token.narrow(0, 0, rows), eager.logprob.narrow(0, 0, rows),
                                  eager.tempered_logprob.narrow(0, 0, rows)};
      return std::nullopt;
    }
    // The graphs' self-check (ops/kernel_choice.h; not with --kernels custom): the replayed step
    // must choose the eager step's tokens. In auto a mismatch warns once and turns graphs off on
    // this device for the rest of the process.
    if (ops::kernel_mode() == ops::KernelMode::kAuto) {
      ops::KernelCheck check;
      check.cases = 1;
      check.worst_case = fmt::format("decode step replayed for a bucket of {} rows", size);
      check.worst_error = bucket->out.token.ne(eager.token).sum().item<double>();
      check.passed = check.worst_error == 0;
      check.seconds = std::chrono::duration<double>(Clock::now() - started).count();
      if (!check.passed) {
        give_up(check);  // clears the buckets: the eager result is the step's
        return ops::SampledTokens{eager.token.narrow(0, 0, rows), eager.logprob.narrow(0, 0, rows),
                                  eager.tempered_logprob.narrow(0, 0, rows)};
      }
      ops::record_kernel_check(ops::Kernel::kCudaGraphs, model_.options().device(), check);
    }
  } else {
    RQAT_MARK_KERNEL("rqat::cuda_graph_replay");  // one graph launch (bench/op_counter.h)
    bucket->graph.replay();
    perturb_if_faulty(bucket->out);
    ++replays_;
  }
  return ops::SampledTokens{bucket->out.token.narrow(0, 0, rows),
                            bucket->out.logprob.narrow(0, 0, rows),
                            bucket->out.tempered_logprob.narrow(0, 0, rows)};
}

#else  // no CUDA: graphs never run

struct DecodeGraphs::Bucket {};

DecodeGraphs::DecodeGraphs(model::CausalLM& model, model::PagedKVCache& cache, int64_t max_batch,
                           int64_t max_blocks, bool)
    : model_(model),
      cache_(cache),
      max_batch_(max_batch),
      max_blocks_(max_blocks),
      enabled_(false) {}

DecodeGraphs::~DecodeGraphs() = default;

void DecodeGraphs::disable(const std::string&) { enabled_ = false; }

std::optional<ops::SampledTokens> DecodeGraphs::run(const model::PagedStep&,
                                                    const ops::SamplingTensors&) {
  return std::nullopt;
}

#endif

}  // namespace rqat::generation

// What a piece of work would cost a GPU, counted on the CPU at the dispatcher (a RecordFunction
// observer, as the PyTorch profiler listens): the kernel launches (leaf ATen operator calls that
// run a kernel, and rqat's own kernels, which mark themselves "rqat::<kernel>"), the host-device
// synchronizations (reads back to the host: item, nonzero, masked_select, unique, equal, ... and
// rqat's marked copies to the host) with the bytes they bring back, the transfers rqat marks as
// uploads, tensor moves that go through no marked copy (each a transfer on a GPU that nobody
// meant), and CUDA graph replays. For benchmarks (bench_generate, bench_qat_step,
// bench_grpo_update) and for the tests that bound these counts (test_gpu_cost), never for the
// tools.
//
// Counted as launches: every operator call none of whose callees launched (a leaf, or one that only
// made views inside, as linalg_vector_norm), except those that only make views, allocate or read
// metadata (view, reshape as a view, select, slice, transpose, empty, contiguous of a contiguous
// tensor, ...). A composite operator therefore counts the kernels it dispatches to, as a GPU runs
// them. (Until 2026-12-05 any callee made a call a composite, and a norm counted nothing.) On the CPU a few operators take other paths than on a GPU
// (a fused CPU kernel instead of several ATen calls): the counts are those of the path that ran.
// PyTorch's multi-tensor kernels (aten::_fused_adamw_, aten::_foreach_norm) count as one launch,
// as on a GPU; their CPU implementations loop over the tensors (the fused optimizers reading each
// step count with item()), which is not counted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace rqat::bench {

struct OpCounts {
  int64_t launches = 0;
  int64_t syncs = 0;       // host reads: the host waits for the device
  int64_t host_bytes = 0;  // bytes those reads bring to the host
  int64_t uploads = 0;     // rqat::copy_to_device (a step's inputs going to the device)
  int64_t upload_bytes = 0;
  int64_t unmarked_moves = 0;  // aten::to / _to_copy with a device outside a marked copy
  int64_t graph_launches = 0;  // rqat::cuda_graph_replay
  std::map<std::string, int64_t> launches_by_op, syncs_by_op, moves_by_op;

  OpCounts operator-(const OpCounts& earlier) const;
  // Every count divided by n, rounded to the nearest (per step from a difference of n steps).
  OpCounts per(int64_t n) const;
  // "launches 1234, syncs 1 (16 B to the host), uploads 3 (200 B), unmarked moves 0, graphs 0".
  std::string summary() const;
  // The top `n` operators by launches, "aten::mm 120, aten::add 80, ...".
  std::string top_launches(size_t n = 8) const;
};

// Counts while it lives (one at a time per process), on every thread.
class OpCounter {
 public:
  OpCounter();
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  OpCounts counts() const;  // so far

 private:
  uint64_t handle_;
};

}  // namespace rqat::bench

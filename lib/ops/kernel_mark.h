// Marks a call of one of rqat's own kernels for dispatcher observers (the op counters of the
// benchmarks and tests, bench/op_counter.h, and the PyTorch profiler): a RecordFunction named
// "rqat::<kernel>", which an observer counts as one kernel launch. Costs a branch when nobody
// observes.
#pragma once

#include <ATen/record_function.h>

#include <vector>

#define RQAT_MARK_KERNEL(name) RECORD_FUNCTION(name, std::vector<c10::IValue>())

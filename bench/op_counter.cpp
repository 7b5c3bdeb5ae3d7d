// See op_counter.h. A global RecordFunction callback keeps a stack of open calls per thread; a
// call's end knows whether an operator it called launched a kernel (then it is a composite whose
// kernels were counted; one that only made views, as linalg_vector_norm's as_strided, is still a
// kernel itself) and whether it ran inside a marked copy or a sync already counted.
#include "op_counter.h"

#include <ATen/record_function.h>
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

namespace rqat::bench {

namespace {

// Operators that launch nothing on a GPU when they call nothing else: views, allocation, metadata.
const std::set<std::string_view, std::less<>> kNoKernel = {
    "aten::view",
    "aten::_unsafe_view",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::as_strided",
    "aten::slice",
    "aten::select",
    "aten::narrow",
    "aten::transpose",
    "aten::t",
    "aten::permute",
    "aten::expand",
    "aten::expand_as",
    "aten::squeeze",
    "aten::unsqueeze",
    "aten::alias",
    "aten::detach",
    "aten::detach_",
    "aten::lift_fresh",
    "aten::view_as",
    "aten::unflatten",
    "aten::flatten",
    "aten::split",
    "aten::split_with_sizes",
    "aten::chunk",
    "aten::unbind",
    "aten::diagonal",
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::as_strided_",
    "aten::unsafe_split",
    "aten::unsafe_chunk",
    "aten::tensor_split",
    "aten::resize_",
    "aten::set_",
    "aten::contiguous",
    "aten::to",
    "aten::result_type",
    "aten::size",
    "aten::stride",
    "aten::numel",
    "aten::dim",
    "aten::broadcast_tensors",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::conj",
    "aten::_conj",
    "aten::movedim",
    "aten::swapaxes",
    "aten::unfold",
    "aten::view_as_real",
    "aten::requires_grad_",
    "aten::retain_grad",
    "aten::output_nr",
    "aten::_version",
    "aten::is_same_size",
    "aten::item",
    "aten::lift",
    "aten::_local_scalar_dense",
    "aten::sym_size",
    "aten::sym_stride",
    "aten::sym_numel",
    "aten::is_contiguous",
};

// Operators whose result the host must wait for (each one sync, counted at the outermost).
const std::set<std::string_view, std::less<>> kSyncing = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::equal",
    "aten::is_nonzero",
    "aten::allclose",
    "aten::bincount",
    "aten::repeat_interleave",
};

// PyTorch's multi-tensor kernels: one kernel per call on a GPU (per chunk of tensors; one here),
// where the CPU loops over the tensors with an operator each (the fused optimizers also read each
// step count with item(), which a GPU's kernel reads from device memory): what they call inside is
// not counted.
const std::set<std::string_view, std::less<>> kFusedKernels = {
    "aten::_fused_adamw_",
    "aten::_fused_adam_",
    "aten::_foreach_norm",
};

constexpr std::string_view kCopyToHost = "rqat::copy_to_host";
constexpr std::string_view kCopyToDevice = "rqat::copy_to_device";
constexpr std::string_view kGraphReplay = "rqat::cuda_graph_replay";

struct Frame {
  std::string_view name;
  bool child_launched = false;  // an operator it called counted a launch (it is a composite)
  bool in_copy = false;  // inside a marked copy (its moves are meant)
  bool in_sync = false;  // inside a counted sync (nested syncs are the same wait)
  bool opaque = false;   // a fused kernel or inside one: counted once, at the fused call
};

thread_local std::vector<Frame> frames;

std::mutex counts_mutex;
OpCounts totals;

int64_t tensor_bytes(const c10::IValue& value) {
  if (!value.isTensor()) return 0;
  const auto& t = value.toTensor();
  return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
}

// aten::to / _to_copy given a device (their overloads take it as a Device or an optional one).
bool moves_to_a_device(const at::RecordFunction& fn) {
  for (const auto& input : fn.inputs())
    if (input.isDevice()) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  Frame frame{name};
  if (!frames.empty()) {
    frame.in_copy = frames.back().in_copy;
    frame.in_sync = frames.back().in_sync;
    frame.opaque = frames.back().opaque;
  }
  if (frame.opaque) {
    frames.push_back(frame);
    return nullptr;
  }
  std::lock_guard lock(counts_mutex);
  if (kFusedKernels.count(name)) {
    ++totals.launches;
    ++totals.launches_by_op[std::string(name)];
    frame.opaque = true;
  } else if (name == kCopyToHost) {
    ++totals.syncs;
    ++totals.syncs_by_op[std::string(name)];
    if (fn.num_inputs() > 0) totals.host_bytes += tensor_bytes(fn.inputs()[0]);
    frame.in_copy = frame.in_sync = true;
  } else if (name == kCopyToDevice) {
    ++totals.uploads;
    if (fn.num_inputs() > 0) totals.upload_bytes += tensor_bytes(fn.inputs()[0]);
    frame.in_copy = true;
  } else if (name == kGraphReplay) {
    ++totals.graph_launches;
  } else if (name.starts_with("rqat::")) {
    ++totals.launches;  // one of rqat's own kernels
    ++totals.launches_by_op[std::string(name)];
  } else if (kSyncing.count(name) && !frame.in_sync) {
    ++totals.syncs;
    ++totals.syncs_by_op[std::string(name)];
    totals.host_bytes += name == "aten::_local_scalar_dense" && fn.num_inputs() > 0
                             ? tensor_bytes(fn.inputs()[0])
                             : 8;
    frame.in_sync = true;
  } else if ((name == "aten::to" || name == "aten::_to_copy") && !frame.in_copy &&
             moves_to_a_device(fn)) {
    ++totals.unmarked_moves;
    ++totals.moves_by_op[std::string(name)];
    frame.in_copy = true;  // its own nested _to_copy is the same move
  }
  frames.push_back(frame);
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  (void)fn;
  if (frames.empty()) return;  // started before the counter
  const Frame frame = frames.back();
  frames.pop_back();
  bool launched = frame.child_launched || frame.name.starts_with("rqat::") ||
                  (frame.opaque && kFusedKernels.count(frame.name));
  if (!frame.opaque && !launched && frame.name.starts_with("aten::") &&
      !kNoKernel.count(frame.name)) {
    std::lock_guard lock(counts_mutex);
    ++totals.launches;
    ++totals.launches_by_op[std::string(frame.name)];
    launched = true;
  }
  if (launched && !frames.empty()) frames.back().child_launched = true;
}

std::string bytes_text(int64_t bytes) {
  return bytes < 10000 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace

OpCounts OpCounts::operator-(const OpCounts& earlier) const {
  OpCounts d = *this;
  d.launches -= earlier.launches;
  d.syncs -= earlier.syncs;
  d.host_bytes -= earlier.host_bytes;
  d.uploads -= earlier.uploads;
  d.upload_bytes -= earlier.upload_bytes;
  d.unmarked_moves -= earlier.unmarked_moves;
  d.graph_launches -= earlier.graph_launches;
  using Map = std::map<std::string, int64_t>;
  const std::pair<Map*, const Map*> maps[] = {{&d.launches_by_op, &earlier.launches_by_op},
                                              {&d.syncs_by_op, &earlier.syncs_by_op},
                                              {&d.moves_by_op, &earlier.moves_by_op}};
  for (const auto& [mine, theirs] : maps) {
    for (const auto& [op, n] : *theirs) (*mine)[op] -= n;
    std::erase_if(*mine, [](const auto& entry) { return entry.second == 0; });
  }
  return d;
}

OpCounts OpCounts::per(int64_t n) const {
  const auto div = [n](int64_t v) { return (v + n / 2) / n; };
  OpCounts d = *this;
  for (int64_t* v : {&d.launches, &d.syncs, &d.host_bytes, &d.uploads, &d.upload_bytes,
                     &d.unmarked_moves, &d.graph_launches})
    *v = div(*v);
  for (auto* map : {&d.launches_by_op, &d.syncs_by_op, &d.moves_by_op})
    for (auto& [op, v] : *map) v = div(v);
  return d;
}

std::string OpCounts::summary() const {
  return fmt::format(
      "launches {}, syncs {} ({} to the host), uploads {} ({}), unmarked moves {}, graph "
      "launches {}",
      launches, syncs, bytes_text(host_bytes), uploads, bytes_text(upload_bytes), unmarked_moves,
      graph_launches);
}

std::string OpCounts::top_launches(size_t n) const {
  std::vector<std::pair<std::string, int64_t>> ops(launches_by_op.begin(), launches_by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::string out;
  for (size_t i = 0; i < std::min(n, ops.size()); ++i)
    out += fmt::format("{}{} {}", i ? ", " : "", ops[i].first, ops[i].second);
  return out;
}

OpCounter::OpCounter() {
  {
    std::lock_guard lock(counts_mutex);
    totals = OpCounts{};
  }
  handle_ =
      at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                .needsInputs(true)
                                .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
}

OpCounter::~OpCounter() { at::removeCallback(handle_); }

OpCounts OpCounter::counts() const {
  std::lock_guard lock(counts_mutex);
  return totals;
}

}  // namespace rqat::bench

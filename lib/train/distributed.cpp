// Process-group setup and bucketed collectives for data parallelism (see distributed.h).
//
// ProcessGroupGloo.hpp declares its class only when USE_C10D_GLOO is defined, and it needs gloo's
// own headers (Debian's libgloo-dev); all gloo code itself comes from libtorch_cpu. The macro is
// defined here rather than on the target because a target-wide definition would change the flags
// of the precompiled header that apps and tests reuse.
#define USE_C10D_GLOO 1

#include "train/distributed.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <unordered_set>
#include <utility>

#include "io/error.h"

namespace rqat::train {

namespace detail {
// Defined in distributed_nccl.cpp, which is compiled only in CUDA builds.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size, c10::Device& device,
                                                    std::chrono::milliseconds timeout);
}  // namespace detail

namespace {

// --- Environment variables -------------------------------------------------------------------

// An empty variable counts as unset: `export MASTER_ADDR=` in a job script means "not given".
std::optional<std::string> lookup(const EnvLookup& getenv, const std::string& name) {
  auto value = getenv(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

int64_t parse_integer(const std::string& name, const std::string& value, int64_t min, int64_t max) {
  int64_t parsed = 0;
  const char* end = value.data() + value.size();
  auto [stop, error] = std::from_chars(value.data(), end, parsed);
  if (error != std::errc() || stop != end) fail("{}='{}' is not an integer", name, value);
  if (parsed < min || parsed > max) {
    fail("{}={} is out of range [{}, {}]", name, parsed, min, max);
  }
  return parsed;
}

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

int required_int(const EnvLookup& getenv, const std::string& name, int64_t min, int64_t max,
                 const std::string& why) {
  auto value = lookup(getenv, name);
  if (!value) fail("{} is not set ({})", name, why);
  return static_cast<int>(parse_integer(name, *value, min, max));
}

int optional_int(const EnvLookup& getenv, const std::string& name, int64_t min, int64_t max,
                 int fallback) {
  auto value = lookup(getenv, name);
  return value ? static_cast<int>(parse_integer(name, *value, min, max)) : fallback;
}

void check_rank(const std::string& rank_name, int rank, const std::string& size_name, int size) {
  if (rank >= size) fail("{}={} must be below {}={}", rank_name, rank, size_name, size);
}

DistributedEnv torchrun_env(const EnvLookup& getenv) {
  DistributedEnv env;
  env.launcher = "torchrun";
  env.world_size = required_int(getenv, "WORLD_SIZE", 1, kMaxInt, "RANK is set");
  env.rank = required_int(getenv, "RANK", 0, kMaxInt, "WORLD_SIZE is set");
  check_rank("RANK", env.rank, "WORLD_SIZE", env.world_size);
  // torchrun always exports both; without them assume one node, which is what a hand-written
  // launch of a few local processes usually is.
  env.local_world_size = optional_int(getenv, "LOCAL_WORLD_SIZE", 1, kMaxInt, env.world_size);
  env.local_rank = optional_int(getenv, "LOCAL_RANK", 0, kMaxInt, env.rank);
  check_rank("LOCAL_RANK", env.local_rank, "LOCAL_WORLD_SIZE", env.local_world_size);
  if (env.local_world_size > env.world_size) {
    fail("LOCAL_WORLD_SIZE={} must not exceed WORLD_SIZE={}", env.local_world_size, env.world_size);
  }
  env.master_addr = lookup(getenv, "MASTER_ADDR").value_or(env.master_addr);
  env.master_port = optional_int(getenv, "MASTER_PORT", 1, 65535, env.master_port);
  env.agent_store = lookup(getenv, "TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  env.restart_count = optional_int(getenv, "TORCHELASTIC_RESTART_COUNT", 0, kMaxInt, 0);
  return env;
}

DistributedEnv slurm_env(const EnvLookup& getenv, int ntasks) {
  DistributedEnv env;
  env.launcher = "slurm";
  env.world_size = ntasks;
  const std::string why = fmt::format("SLURM_NTASKS={}: launch every task with srun", ntasks);
  env.rank = required_int(getenv, "SLURM_PROCID", 0, kMaxInt, why);
  check_rank("SLURM_PROCID", env.rank, "SLURM_NTASKS", ntasks);
  env.local_rank = required_int(getenv, "SLURM_LOCALID", 0, kMaxInt, why);
  if (auto per_node = lookup(getenv, "SLURM_NTASKS_PER_NODE")) {
    env.local_world_size =
        static_cast<int>(parse_integer("SLURM_NTASKS_PER_NODE", *per_node, 1, kMaxInt));
  } else if (auto tasks = lookup(getenv, "SLURM_TASKS_PER_NODE")) {
    int node = optional_int(getenv, "SLURM_NODEID", 0, kMaxInt, 0);
    env.local_world_size = slurm_tasks_on_node(*tasks, node, "SLURM_TASKS_PER_NODE");
  } else {
    fail("neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set ({})", why);
  }
  if (env.local_rank >= env.local_world_size) {
    fail("SLURM_LOCALID={} must be below this node's task count {}", env.local_rank,
         env.local_world_size);
  }

  if (auto addr = lookup(getenv, "MASTER_ADDR")) {
    env.master_addr = *addr;
  } else if (auto list = lookup(getenv, "SLURM_JOB_NODELIST")) {
    env.master_addr = first_slurm_host(*list, "SLURM_JOB_NODELIST");
  } else if (auto old_list = lookup(getenv, "SLURM_NODELIST")) {
    env.master_addr = first_slurm_host(*old_list, "SLURM_NODELIST");
  } else {
    fail("none of MASTER_ADDR, SLURM_JOB_NODELIST, SLURM_NODELIST is set ({})", why);
  }
  if (auto port = lookup(getenv, "MASTER_PORT")) {
    env.master_port = static_cast<int>(parse_integer("MASTER_PORT", *port, 1, 65535));
  } else if (auto job = lookup(getenv, "SLURM_JOB_ID")) {
    // Derived from the job id so that two jobs sharing a node do not collide, while every task
    // of one job computes the same port without talking to the others.
    int64_t id = parse_integer("SLURM_JOB_ID", *job, 0, std::numeric_limits<int64_t>::max());
    env.master_port = static_cast<int>(20000 + id % 20000);
  } else {
    fail("neither MASTER_PORT nor SLURM_JOB_ID is set ({})", why);
  }
  return env;
}

// Splits at commas outside brackets: "a[1,2],b" -> {"a[1,2]", "b"}.
std::vector<std::string> split_top_level(const std::string& list, const std::string& variable) {
  std::vector<std::string> parts(1);
  int depth = 0;
  for (char c : list) {
    if (c == '[' && ++depth > 1) fail("{}='{}' has nested '['", variable, list);
    if (c == ']' && --depth < 0) fail("{}='{}' has a ']' without '['", variable, list);
    if (c == ',' && depth == 0) {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  if (depth != 0) fail("{}='{}' has a '[' without ']'", variable, list);
  return parts;
}

bool all_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

// The first number of a bracketed range list "01-04,07" -> "01" (leading zeros kept: Slurm pads
// host numbers to the width written in the list). Every item is checked, not only the first.
std::string first_of_range_list(const std::string& ranges, const std::string& list,
                                const std::string& variable) {
  std::string first;
  size_t start = 0;
  while (true) {
    size_t comma = ranges.find(',', start);
    std::string item = ranges.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = item.find('-');
    std::string low = item.substr(0, dash);
    std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    if (!all_digits(low) || !all_digits(high) || std::stoull(low) > std::stoull(high)) {
      fail("{}='{}' has a bad range '{}' (expected N or N-M with N <= M)", variable, list, item);
    }
    if (first.empty()) first = low;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return first;
}

// --- Collectives -----------------------------------------------------------------------------

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Backend failures (a peer that died, a timeout, an unsupported dtype) surface as c10::Error or
// gloo exceptions with multi-line messages; callers get the project's one-line error instead.
template <class Fn>
auto with_one_line_errors(const std::string& what, int rank, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& error) {
    fail("distributed {} failed on rank {}: {}", what, rank,
         first_line(error.what_without_backtrace()));
  } catch (const std::exception& error) {
    fail("distributed {} failed on rank {}: {}", what, rank, first_line(error.what()));
  }
}

uint64_t fnv1a(uint64_t hash, uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) {
    hash ^= (value >> (8 * byte)) & 0xff;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::vector<std::shared_ptr<gloo::transport::Device>> gloo_devices() {
  // The same knob as PyTorch's: GLOO_SOCKET_IFNAME=eth0,eth1 picks the network interfaces when the
  // host name resolves to an address the other nodes cannot reach.
  std::vector<std::shared_ptr<gloo::transport::Device>> devices;
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names && *names) {
    for (const std::string& name : split_top_level(names, "GLOO_SOCKET_IFNAME")) {
      if (name.empty()) fail("GLOO_SOCKET_IFNAME='{}' has an empty interface name", names);
      devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
  } else {
    devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return devices;
}

}  // namespace

// --- Public: environment -----------------------------------------------------------------------

DistributedEnv detect_distributed_env(const EnvLookup& getenv) {
  bool has_rank = lookup(getenv, "RANK").has_value();
  bool has_world = lookup(getenv, "WORLD_SIZE").has_value();
  if (has_rank || has_world) return torchrun_env(getenv);
  if (auto ntasks = lookup(getenv, "SLURM_NTASKS")) {
    int n = static_cast<int>(parse_integer("SLURM_NTASKS", *ntasks, 1, kMaxInt));
    if (n > 1) return slurm_env(getenv, n);
  }
  return DistributedEnv{};
}

DistributedEnv detect_distributed_env() {
  return detect_distributed_env([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

std::string first_slurm_host(const std::string& nodelist, const std::string& variable) {
  std::string host_pattern = split_top_level(nodelist, variable).front();
  if (host_pattern.empty()) fail("{}='{}' does not start with a host name", variable, nodelist);
  std::string host;
  size_t pos = 0;
  while (pos < host_pattern.size()) {
    size_t open = host_pattern.find('[', pos);
    host += host_pattern.substr(pos, open == std::string::npos ? open : open - pos);
    if (open == std::string::npos) break;
    size_t close = host_pattern.find(']', open);  // balanced: checked by split_top_level
    host +=
        first_of_range_list(host_pattern.substr(open + 1, close - open - 1), nodelist, variable);
    pos = close + 1;
  }
  return host;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id,
                        const std::string& variable) {
  int64_t nodes_seen = 0;
  for (const std::string& item : split_top_level(tasks_per_node, variable)) {
    // "4" or "4(x2)": 4 tasks on each of the next 2 nodes.
    size_t paren = item.find("(x");
    std::string tasks = item.substr(0, paren);
    int64_t repeat = 1;
    if (paren != std::string::npos) {
      std::string count = item.substr(paren + 2);
      if (count.empty() || count.back() != ')' || !all_digits(count.substr(0, count.size() - 1))) {
        fail("{}='{}' has a bad item '{}' (expected N or N(xM))", variable, tasks_per_node, item);
      }
      repeat = parse_integer(variable, count.substr(0, count.size() - 1), 1, kMaxInt);
    }
    if (!all_digits(tasks)) {
      fail("{}='{}' has a bad item '{}' (expected N or N(xM))", variable, tasks_per_node, item);
    }
    int per_node = static_cast<int>(parse_integer(variable, tasks, 1, kMaxInt));
    if (node_id < nodes_seen + repeat) return per_node;
    nodes_seen += repeat;
  }
  fail("{}='{}' lists {} nodes, but this is node {} (SLURM_NODEID)", variable, tasks_per_node,
       nodes_seen, node_id);
}

// --- Public: communicator ----------------------------------------------------------------------

struct Communicator::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  // Where collectives run: the CPU for Gloo, the CUDA device for NCCL. Tensors elsewhere are
  // copied there and back, so any backend accepts tensors on any device.
  c10::Device device = c10::Device(c10::kCPU);
};

Communicator::Communicator(int rank, int world_size, std::unique_ptr<Group> group)
    : rank_(rank), world_size_(world_size), group_(std::move(group)) {}

Communicator::~Communicator() = default;

#if !defined(RQAT_WITH_CUDA)
std::string nccl_version() { return ""; }
#endif

std::shared_ptr<Communicator> Communicator::create(const DistributedEnv& env, CommBackend backend,
                                                   c10::Device device,
                                                   std::chrono::seconds timeout) {
  if (env.world_size < 1) fail("distributed: world size {} must be at least 1", env.world_size);
  if (env.rank < 0 || env.rank >= env.world_size) {
    fail("distributed: rank {} is outside [0, {})", env.rank, env.world_size);
  }
  if (timeout.count() <= 0) fail("distributed: timeout {}s must be positive", timeout.count());
  if (backend == CommBackend::kAuto) {
    backend = device.is_cuda() ? CommBackend::kNccl : CommBackend::kGloo;
  }
  // Checked before the single-process shortcut so that a wrong flag fails on a laptop too, not
  // only on the cluster.
  if (backend == CommBackend::kNccl && !device.is_cuda()) {
    fail("--backend nccl needs a CUDA device, but the device is {}: use --backend gloo",
         device.str());
  }
#if !defined(RQAT_WITH_CUDA)
  if (backend == CommBackend::kNccl) {
    fail("--backend nccl needs a CUDA build of rqat (this one is CPU-only): use --backend gloo");
  }
#endif
  if (env.world_size == 1) {
    return std::shared_ptr<Communicator>(new Communicator(0, 1, nullptr));
  }

  auto group = std::make_unique<Group>();
  const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  group->store = with_one_line_errors(fmt::format("rendezvous at {}", where), env.rank, [&] {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(env.master_port);
    options.isServer = env.rank == 0 && !env.agent_store;
    // Every rank, not only the server: a client counts itself in only when it knows the world
    // size, and the server waits for that count to reach it.
    options.numWorkers = env.world_size;
    options.timeout = timeout_ms;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    return c10::intrusive_ptr<c10d::Store>(
        c10::make_intrusive<c10d::PrefixStore>(fmt::format("rqat/{}", env.restart_count), tcp));
  });
  if (backend == CommBackend::kGloo) {
    group->backend = with_one_line_errors("gloo setup", env.rank, [&] {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout_ms);
      options->devices = gloo_devices();
      return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<c10d::ProcessGroupGloo>(
          group->store, env.rank, env.world_size, options));
    });
  } else {
#if defined(RQAT_WITH_CUDA)
    group->backend = with_one_line_errors("nccl setup", env.rank, [&] {
      return detail::make_nccl_backend(group->store, env.rank, env.world_size, device, timeout_ms);
    });
    group->device = device;  // with its index filled in
#endif
  }
  return std::shared_ptr<Communicator>(
      new Communicator(env.rank, env.world_size, std::move(group)));
}

void Communicator::check_same_layout(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes,
                                     const char* what) {
  // One hash of the operation, the bucket size (it decides the buffers' sizes) and every tensor's
  // dtype and shape; all ranks agree when the
  // maximum of h equals the minimum (-max of -h). One tiny collective instead of a hang or of
  // silently summing unrelated buffers when a rank's model or call order differs.
  uint64_t hash = 14695981039346656037ull;
  for (const char* c = what; *c; ++c) hash = fnv1a(hash, static_cast<uint8_t>(*c));
  hash = fnv1a(hash, static_cast<uint64_t>(bucket_bytes));
  hash = fnv1a(hash, tensors.size());
  for (const at::Tensor& tensor : tensors) {
    hash = fnv1a(hash, static_cast<uint64_t>(tensor.scalar_type()));
    hash = fnv1a(hash, static_cast<uint64_t>(tensor.dim()));
    for (int64_t size : tensor.sizes()) hash = fnv1a(hash, static_cast<uint64_t>(size));
  }
  const auto h = static_cast<int64_t>(hash >> 2);  // 62 bits: -h cannot overflow
  at::Tensor extremes =
      at::tensor(std::vector<int64_t>{h, -h}, at::TensorOptions(at::kLong)).to(group_->device);
  with_one_line_errors(what, rank_, [&] {
    std::vector<at::Tensor> io{extremes};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    group_->backend->allreduce(io, options)->wait();
  });
  ++collectives_;
  extremes = extremes.cpu();
  if (extremes[0].item<int64_t>() != -extremes[1].item<int64_t>()) {
    fail(
        "distributed {}: rank {} passed {} tensors whose dtypes or shapes (or bucket size) differ "
        "from another rank's; every rank must pass the same layout in the same call order",
        what, rank_, tensors.size());
  }
}

void Communicator::bucketed(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes,
                            const char* what, const std::function<void(at::Tensor&)>& collective) {
  if (bucket_bytes <= 0)
    fail("distributed {}: bucket_bytes {} must be positive", what, bucket_bytes);
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.defined()) fail("distributed {}: an undefined tensor was passed", what);
    if (tensor.is_sparse()) fail("distributed {}: sparse tensors are not supported", what);
  }
  check_same_layout(tensors, bucket_bytes, what);
  // The results are written into the callers' tensors, which may be parameters (leaves that
  // require grad): that copy is not part of any graph.
  at::NoGradGuard no_grad;

  // Buckets in order of first appearance, one open bucket per (dtype, device): the plan depends
  // only on the layout, so every rank builds the same buckets.
  std::vector<std::vector<size_t>> buckets;
  std::map<std::pair<int, std::string>, std::pair<size_t, int64_t>> open;  // -> bucket, bytes
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    auto key =
        std::make_pair(static_cast<int>(tensors[i].scalar_type()), tensors[i].device().str());
    int64_t bytes = tensors[i].numel() * static_cast<int64_t>(tensors[i].element_size());
    auto it = open.find(key);
    if (it == open.end() || it->second.second + bytes > bucket_bytes) {
      buckets.emplace_back();
      it = open.insert_or_assign(key, std::make_pair(buckets.size() - 1, int64_t{0})).first;
    }
    buckets[it->second.first].push_back(i);
    it->second.second += bytes;
  }

  for (const std::vector<size_t>& bucket : buckets) {
    const at::Tensor& first = tensors[bucket.front()];
    bool in_place = bucket.size() == 1 && first.is_contiguous() && first.device() == group_->device;
    at::Tensor flat;
    if (in_place) {
      flat = first.view({-1});
    } else {
      std::vector<at::Tensor> parts;
      parts.reserve(bucket.size());
      for (size_t i : bucket) parts.push_back(tensors[i].reshape({-1}));
      flat = at::cat(parts).to(group_->device);
    }
    with_one_line_errors(what, rank_, [&] { collective(flat); });
    ++collectives_;
    if (in_place) continue;
    int64_t offset = 0;
    for (size_t i : bucket) {
      at::Tensor target = tensors[i];  // shares storage with the caller's tensor
      target.copy_(flat.narrow(0, offset, target.numel()).view(target.sizes()));
      offset += target.numel();
    }
  }
}

void Communicator::all_reduce_sum(std::vector<at::Tensor>& tensors) {
  // Checked with one rank too, so that a single-process test run catches what a cluster run would.
  for (const at::Tensor& tensor : tensors) {
    if (tensor.defined() && tensor.scalar_type() == at::kBool) {
      fail("distributed all_reduce_sum: bool tensors have no sum; convert them to an integer type");
    }
  }
  if (world_size_ == 1) return;
  bucketed(tensors, 32 << 20, "all_reduce_sum", [&](at::Tensor& flat) {
    std::vector<at::Tensor> io{flat};
    group_->backend->allreduce(io)->wait();
  });
}

void Communicator::all_reduce_gradients(const std::vector<at::Tensor>& parameters,
                                        int64_t bucket_bytes) {
  if (world_size_ == 1) return;
  std::vector<at::Tensor> grads;
  std::unordered_set<const void*> seen;
  for (const at::Tensor& parameter : parameters) {
    if (!parameter.defined()) fail("distributed all_reduce_gradients: undefined parameter");
    if (!parameter.requires_grad() || !seen.insert(parameter.unsafeGetTensorImpl()).second) {
      continue;
    }
    at::Tensor& grad = parameter.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(parameter);
    grads.push_back(grad);
  }
  bucketed(grads, bucket_bytes, "all_reduce_gradients", [&](at::Tensor& flat) {
    std::vector<at::Tensor> io{flat};
    group_->backend->allreduce(io)->wait();
  });
}

namespace {

void check_chunks(const at::Tensor& flat, const at::Tensor& shard, int world_size,
                  const char* what) {
  if (!flat.defined() || !shard.defined()) fail("distributed {}: an undefined tensor", what);
  if (flat.numel() != shard.numel() * world_size || flat.scalar_type() != shard.scalar_type() ||
      !flat.is_contiguous() || !shard.is_contiguous())
    fail("distributed {}: {} contiguous elements of {} do not split into {} shards of {} of {}",
         what, flat.numel(), c10::toString(flat.scalar_type()), world_size, shard.numel(),
         c10::toString(shard.scalar_type()));
}

}  // namespace

void Communicator::reduce_scatter_sum(const at::Tensor& flat, at::Tensor& shard) {
  check_chunks(flat, shard, world_size_, "reduce_scatter_sum");
  at::NoGradGuard no_grad;
  if (world_size_ == 1) {
    shard.copy_(flat);
    return;
  }
  // The layout comes from the same bucket plan on every rank (no layout check: it would double
  // the collectives of a sharded backward pass).
  const at::Tensor input = flat.to(group_->device);
  at::Tensor output = shard.device() == group_->device ? shard : at::empty_like(shard, input.options());
  std::vector<at::Tensor> outputs{output};
  std::vector<std::vector<at::Tensor>> inputs{input.chunk(world_size_)};
  with_one_line_errors("reduce_scatter_sum", rank_, [&] {
    group_->backend->reduce_scatter(outputs, inputs)->wait();
  });
  ++collectives_;
  if (!output.is_same(shard)) shard.copy_(output);
}

void Communicator::all_gather(const at::Tensor& shard, at::Tensor& flat) {
  check_chunks(flat, shard, world_size_, "all_gather");
  at::NoGradGuard no_grad;
  if (world_size_ == 1) {
    flat.copy_(shard);
    return;
  }
  at::Tensor input = shard.to(group_->device);
  at::Tensor output = flat.device() == group_->device ? flat : at::empty_like(flat, input.options());
  std::vector<at::Tensor> inputs{input};
  std::vector<std::vector<at::Tensor>> outputs{output.chunk(world_size_)};
  with_one_line_errors("all_gather", rank_, [&] {
    group_->backend->allgather(outputs, inputs)->wait();
  });
  ++collectives_;
  if (!output.is_same(flat)) flat.copy_(output);
}

int64_t Communicator::all_reduce_max(int64_t value) {
  if (world_size_ == 1) return value;
  std::vector<at::Tensor> io{at::full({1}, value, at::TensorOptions(at::kLong)).to(group_->device)};
  with_one_line_errors("all_reduce_max", rank_, [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    group_->backend->allreduce(io, options)->wait();
  });
  ++collectives_;
  return io[0].cpu().item<int64_t>();
}

double Communicator::all_reduce_sum(double value) {
  if (world_size_ == 1) return value;
  std::vector<at::Tensor> io{at::full({1}, value, at::TensorOptions(at::kDouble))};
  all_reduce_sum(io);
  return io[0].item<double>();
}

int64_t Communicator::all_reduce_sum(int64_t value) {
  if (world_size_ == 1) return value;
  std::vector<at::Tensor> io{at::full({1}, value, at::TensorOptions(at::kLong))};
  all_reduce_sum(io);
  return io[0].item<int64_t>();
}

void Communicator::broadcast_from_main(std::vector<at::Tensor>& tensors) {
  if (world_size_ == 1) return;
  bucketed(tensors, 32 << 20, "broadcast_from_main", [&](at::Tensor& flat) {
    std::vector<at::Tensor> io{flat};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    group_->backend->broadcast(io, options)->wait();
  });
}

bool Communicator::any(bool flag) {
  if (world_size_ == 1) return flag;
  return all_reduce_sum(int64_t{flag ? 1 : 0}) > 0;
}

void Communicator::barrier() {
  if (world_size_ == 1) return;
  with_one_line_errors("barrier", rank_, [&] { group_->backend->barrier()->wait(); });
  ++collectives_;
}

}  // namespace rqat::train

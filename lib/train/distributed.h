// Data-parallel communication for the trainers: which rank this process is (from torchrun's or
// SLURM's environment variables) and the few collectives a data-parallel training loop needs
// (gradient and metric sums, broadcasting rank 0's weights, agreeing to stop), on c10d's Gloo
// (CPU) or NCCL (CUDA) backends. A single process needs no launcher and no network: every
// collective is then a no-op.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/enum_names.h"

namespace rqat::train {

struct DistributedEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "single";  // "single" | "torchrun" | "slurm"
  // torchrun's agent already serves the rendezvous store at master_addr:master_port
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank connects to it as a client instead of rank 0
  // binding the port, and keys are prefixed with the restart count so that a restarted worker
  // group never reads the keys of the previous attempt.
  bool agent_store = false;
  int restart_count = 0;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) win when RANK and WORLD_SIZE are set; else SLURM's (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE; master = MASTER_ADDR if set, else
// the first host of SLURM_JOB_NODELIST / SLURM_NODELIST; port = MASTER_PORT if set, else
// 20000 + SLURM_JOB_ID % 20000) when SLURM_NTASKS > 1; else a single process. An empty variable
// counts as unset. Bad values: one-line rqat::Error naming the variable.
DistributedEnv detect_distributed_env(const EnvLookup& getenv);
DistributedEnv detect_distributed_env();  // the process environment

// The first host of a Slurm host list in its compressed form: "gpu[01-04,07],cpu3" -> "gpu01",
// "rack[2-3]-n[5-6]" -> "rack2-n5". `variable` names the list's source in errors.
std::string first_slurm_host(const std::string& nodelist, const std::string& variable);

// The task count of node `node_id` in SLURM_TASKS_PER_NODE's compressed form: "4(x2),3" means
// nodes 0 and 1 run 4 tasks each and node 2 runs 3.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id,
                        const std::string& variable);

// The NCCL library's version ("2.27.3"), or "" in a build without CUDA.
std::string nccl_version();

enum class CommBackend { kAuto, kGloo, kNccl, kCount };  // auto: nccl on CUDA, gloo on the CPU
constexpr EnumNames<CommBackend> enum_names(CommBackend) { return {"auto", "gloo", "nccl"}; }

// Collectives must be called by every rank in the same order with the same tensor layouts (as in
// any SPMD program). A layout that differs between ranks is detected and reported as an error on
// every rank instead of silently mixing unrelated values or hanging. Failures of the backend
// (a peer that died, a timeout) are rethrown as rqat::Error naming the collective.
class Communicator {
 public:
  // world_size 1: no process group is made, every collective is a no-op (so single-process runs
  // need nothing). Otherwise this blocks until every rank has joined (at most `timeout`, which
  // also bounds every later collective).
  static std::shared_ptr<Communicator> create(
      const DistributedEnv& env, CommBackend backend, c10::Device device,
      std::chrono::seconds timeout = std::chrono::seconds(1800));
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_main() const { return rank() == 0; }

  // Element-wise sum over ranks, in place; any dtype but bool, any device, any strides.
  void all_reduce_sum(std::vector<at::Tensor>& tensors);
  // Sums the .grad() of every parameter that requires grad, in place, flattening into buckets of
  // <= bucket_bytes per dtype (one collective per bucket, not per tensor). A parameter that
  // requires grad but has none on this rank gets a zero grad first, so that every rank sends the
  // same layout (another rank may have used it this step). Parameters that do not require grad
  // are skipped; a parameter listed twice (tied weights) is summed once. With one rank nothing
  // is touched.
  void all_reduce_gradients(const std::vector<at::Tensor>& parameters,
                            int64_t bucket_bytes = 32 << 20);
  // Sharded state (train/sharded_parameters.h): `flat` holds world_size equal chunks; rank r's
  // `shard` becomes the sum over ranks of their chunk r (the same dtype, flat.numel() ==
  // world_size * shard.numel()). With one rank it is a copy.
  void reduce_scatter_sum(const at::Tensor& flat, at::Tensor& shard);
  // The inverse layout: chunk r of `flat` becomes rank r's `shard`, on every rank.
  void all_gather(const at::Tensor& shard, at::Tensor& flat);
  int64_t all_reduce_max(int64_t value);
  double all_reduce_sum(double value);
  int64_t all_reduce_sum(int64_t value);
  // rank 0's values to all, in place.
  void broadcast_from_main(std::vector<at::Tensor>& tensors);
  // True on every rank if it is true on any rank (e.g. a SIGTERM seen by one rank stops all at
  // the same step).
  bool any(bool flag);
  void barrier();

  // How many collectives this communicator has issued (layout checks included): lets tests and
  // logs confirm that gradients travel in buckets, not one tensor at a time.
  int64_t collective_count() const { return collectives_; }

 private:
  struct Group;  // the c10d store and backend (defined in distributed.cpp)

  Communicator(int rank, int world_size, std::unique_ptr<Group> group);
  // Runs `collective` on flat same-dtype buckets of `tensors` (<= bucket_bytes each), copying the
  // results back into the tensors. `what` names the operation in errors.
  void bucketed(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes, const char* what,
                const std::function<void(at::Tensor&)>& collective);
  void check_same_layout(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes,
                         const char* what);

  int rank_ = 0;
  int world_size_ = 1;
  int64_t collectives_ = 0;
  std::unique_ptr<Group> group_;  // null with one rank
};

}  // namespace rqat::train

// Data-parallel communication: rank detection from torchrun/SLURM variables, and a real two-process
// Gloo group (this process and a forked child) whose collectives are compared with sums computed
// here element by element from inputs both ranks can regenerate from known seeds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/BFloat16.h>

#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/error.h"
#include "test_util.h"
#include "train/distributed.h"

using rqat::test::require_error;
using namespace rqat::train;

namespace {

// --- Two ranks in two processes -------------------------------------------------------------
// These cases come first in the file and fork before this process has run any sizeable tensor
// op: a child forked after OpenMP started its threads may hang in its first parallel region.

// A port nobody listens on now: the kernel picks a free one for a socket bound to port 0. It is
// released before rank 0's store binds it; another process taking it within that instant is the
// only (remote) way for this to fail, and it would fail loudly, not hang.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

DistributedEnv two_rank_env(int rank, int port) {
  DistributedEnv env;
  env.rank = rank;
  env.world_size = 2;
  env.local_rank = rank;
  env.local_world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Tensors of several dtypes whose values depend on `seed`; every rank can make any rank's set.
std::vector<at::Tensor> summands(uint64_t seed) {
  auto gen = generator(seed);
  return {
      at::randn({3, 5}, gen, at::kFloat),
      at::randn({7}, gen, at::kDouble),
      at::randint(-1000, 1000, {2, 2}, gen, at::kLong),
      at::randint(-1000, 1000, {3}, gen, at::kInt),
      at::randn({4}, gen, at::kFloat).to(at::kBFloat16),
      at::randn({4, 6}, gen, at::kFloat).t(),  // a non-contiguous view
  };
}

// a + b element by element in the tensors' own dtype (the rounding a single addition has).
template <class T>
bool equals_elementwise_sum(const at::Tensor& result, const at::Tensor& a, const at::Tensor& b) {
  at::Tensor r = result.contiguous(), x = a.contiguous(), y = b.contiguous();
  if (r.sizes() != x.sizes() || r.scalar_type() != x.scalar_type()) return false;
  const T* pr = r.data_ptr<T>();
  const T* px = x.data_ptr<T>();
  const T* py = y.data_ptr<T>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    T expected = static_cast<T>(px[i] + py[i]);
    if (!(pr[i] == expected)) return false;
  }
  return true;
}

bool equals_sum(const at::Tensor& result, const at::Tensor& a, const at::Tensor& b) {
  switch (a.scalar_type()) {
    case at::kFloat:
      return equals_elementwise_sum<float>(result, a, b);
    case at::kDouble:
      return equals_elementwise_sum<double>(result, a, b);
    case at::kLong:
      return equals_elementwise_sum<int64_t>(result, a, b);
    case at::kInt:
      return equals_elementwise_sum<int32_t>(result, a, b);
    case at::kBFloat16:
      return equals_elementwise_sum<c10::BFloat16>(result, a, b);
    default:
      return false;
  }
}

// Parameters of several shapes and dtypes; grads from `seed`. Index 4 has a grad on rank 0 only,
// 5 does not require grad, 6 is empty, 7 is parameter 0 again (tied weights), 8 exceeds a
// 64-byte bucket on its own.
std::vector<at::Tensor> parameters_with_grads(int rank, uint64_t seed) {
  std::vector<at::Tensor> parameters = {
      at::zeros({4, 3}, at::kFloat),     at::zeros({17}, at::kFloat),
      at::zeros({2, 3, 2}, at::kDouble), at::zeros({5}, at::kBFloat16),
      at::zeros({6}, at::kFloat),        at::zeros({3}, at::kFloat),
      at::zeros({0}, at::kFloat),        at::Tensor(),
      at::zeros({40}, at::kFloat)};
  auto gen = generator(seed);
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (i == 7) continue;
    parameters[i].set_requires_grad(i != 5);
    at::Tensor grad = at::randn(parameters[i].sizes(), gen, at::kFloat).to(parameters[i].dtype());
    if (i != 5 && !(i == 4 && rank == 1)) parameters[i].mutable_grad() = grad;
  }
  parameters[7] = parameters[0];
  return parameters;
}

std::vector<std::string> run_rank(int rank, int port) {
  std::vector<std::string> failures;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  };
  auto comm = Communicator::create(two_rank_env(rank, port), CommBackend::kAuto, c10::kCPU,
                                   std::chrono::seconds(30));
  check(comm->rank() == rank && comm->world_size() == 2 && comm->is_main() == (rank == 0),
        "rank and world size");

  // Tensors of every dtype, one non-contiguous.
  std::vector<at::Tensor> tensors = summands(100 + rank);
  const std::vector<at::Tensor> mine = summands(100 + rank), theirs = summands(100 + 1 - rank);
  comm->all_reduce_sum(tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    check(equals_sum(tensors[i], mine[i], theirs[i]),
          fmt::format("all_reduce_sum of tensor {} ({})", i, c10::toString(mine[i].scalar_type())));
  }

  // Scalars.
  check(comm->all_reduce_sum(0.1 * (rank + 1)) == 0.1 + 0.2, "all_reduce_sum(double)");
  check(comm->all_reduce_sum((int64_t{1} << 40) + 3 * rank) == (int64_t{1} << 41) + 3,
        "all_reduce_sum(int64_t) beyond 32 bits");

  // Gradients, with 64-byte buckets and with the default ones.
  for (int64_t bucket_bytes : {int64_t{64}, int64_t{32} << 20}) {
    std::vector<at::Tensor> parameters = parameters_with_grads(rank, 200 + rank);
    const std::vector<at::Tensor> grads0 = parameters_with_grads(0, 200);
    const std::vector<at::Tensor> grads1 = parameters_with_grads(1, 201);
    int64_t before = comm->collective_count();
    comm->all_reduce_gradients(parameters, bucket_bytes);
    // Buckets by hand: float32 {p0 48 B} {p1 68 B} {p4 24 B} {p8 160 B}, float64 {p2}, bf16 {p3}
    // with 64 bytes; one per dtype with 32 MiB; plus the layout check.
    int64_t expected_collectives = bucket_bytes == 64 ? 7 : 4;
    check(comm->collective_count() - before == expected_collectives,
          fmt::format("{} collectives for buckets of {} bytes, expected {}",
                      comm->collective_count() - before, bucket_bytes, expected_collectives));
    for (size_t i : {0, 1, 2, 3, 8}) {
      check(equals_sum(parameters[i].grad(), grads0[i].grad(), grads1[i].grad()),
            fmt::format("grad of parameter {} with {}-byte buckets", i, bucket_bytes));
    }
    // Rank 1 had no grad for parameter 4: it joined with zeros, so both hold rank 0's grad.
    check(parameters[4].grad().defined() && at::equal(parameters[4].grad(), grads0[4].grad()),
          "a grad missing on one rank counts as zeros");
    check(!parameters[5].grad().defined(), "a parameter without requires_grad is left alone");
    check(parameters[6].grad().defined() && parameters[6].grad().numel() == 0, "empty parameter");
  }

  // Broadcast: rank 0's values everywhere, including into a leaf that requires grad, a bool
  // tensor and a non-contiguous view.
  auto broadcast_inputs = [](int r) {
    auto gen = generator(300 + r);
    at::Tensor leaf = at::randn({2, 2}, gen, at::kFloat);
    leaf.set_requires_grad(true);
    return std::vector<at::Tensor>{at::randn({3, 4}, gen, at::kFloat),
                                   at::randint(0, 1 << 30, {5}, gen, at::kLong),
                                   at::randint(0, 2, {6}, gen, at::kLong).to(at::kBool),
                                   at::randn({3, 2}, gen, at::kDouble).t(), leaf};
  };
  std::vector<at::Tensor> broadcast = broadcast_inputs(rank);
  const std::vector<at::Tensor> main_values = broadcast_inputs(0);
  comm->broadcast_from_main(broadcast);
  for (size_t i = 0; i < broadcast.size(); ++i) {
    check(at::equal(broadcast[i], main_values[i]), fmt::format("broadcast tensor {}", i));
  }
  check(broadcast[4].requires_grad() && broadcast[4].is_leaf(), "broadcast keeps the leaf a leaf");

  // Sharded state: reduce-scatter and all-gather of flat buckets (world_size equal chunks), from
  // inputs both ranks regenerate, checked element by element.
  {
    auto flat_of = [](int r) { return at::randn({2 * 37}, generator(400 + r), at::kFloat); };
    const at::Tensor mine = flat_of(rank), theirs = flat_of(1 - rank);
    at::Tensor shard = at::empty({37}, at::kFloat);
    comm->reduce_scatter_sum(mine, shard);
    check(equals_sum(shard, mine.chunk(2)[rank], theirs.chunk(2)[rank]),
          "reduce_scatter_sum keeps this rank's chunk of the sum");
    const at::Tensor piece = at::randn({37}, generator(500 + rank), at::kFloat);
    at::Tensor gathered = at::empty({74}, at::kFloat);
    comm->all_gather(piece, gathered);
    check(at::equal(gathered.chunk(2)[rank], piece) &&
              at::equal(gathered.chunk(2)[1 - rank],
                        at::randn({37}, generator(500 + (1 - rank)), at::kFloat)),
          "all_gather puts rank r's shard in chunk r");
    check(comm->all_reduce_max(int64_t{10 + 5 * rank}) == 15, "all_reduce_max");
    try {
      at::Tensor wrong = at::empty({36}, at::kFloat);
      comm->reduce_scatter_sum(mine, wrong);
      check(false, "a shard of the wrong size is refused");
    } catch (const rqat::Error& error) {
      check(std::string(error.what()).find("do not split") != std::string::npos,
            "the shard-size error says why");
    }
  }
  check(comm->any(rank == 1), "any(true on rank 1 only)");
  check(comm->any(rank == 0), "any(true on rank 0 only)");
  check(!comm->any(false), "any(false everywhere)");
  check(comm->any(true), "any(true everywhere)");
  comm->barrier();

  // Different layouts on the two ranks: both ranks get the error, and the group stays usable.
  std::vector<at::Tensor> mismatched{at::ones({3 + rank}, at::kFloat)};
  try {
    comm->all_reduce_sum(mismatched);
    failures.push_back("no error for layouts that differ between ranks");
  } catch (const rqat::Error& error) {
    check(std::string(error.what()).find("differ") != std::string::npos,
          std::string("layout error message: ") + error.what());
  }
  // Different bucket sizes would cut the same gradients into buffers of different sizes.
  std::vector<at::Tensor> parameters = parameters_with_grads(rank, 400);
  try {
    comm->all_reduce_gradients(parameters, rank == 0 ? 64 : 128);
    failures.push_back("no error for bucket sizes that differ between ranks");
  } catch (const rqat::Error& error) {
    check(std::string(error.what()).find("bucket size") != std::string::npos,
          std::string("bucket size error message: ") + error.what());
  }
  check(comm->all_reduce_sum(int64_t{rank + 1}) == 3, "a collective after the layout errors");
  return failures;
}

// Runs `body(rank)` as rank 1 in a forked child and as rank 0 here; returns the child's status.
template <class Body>
int fork_rank_one(Body body) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(120);  // a hung collective ends the child instead of the whole test run
    int code = 3;
    try {
      code = body(1);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "rank 1 threw: %s\n", error.what());
    }
    std::fflush(stderr);
    ::_exit(code);  // never return into Catch2 from the child
  }
  return child;
}

int wait_for(pid_t child) {
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return status;
}

}  // namespace

TEST_CASE("two ranks over Gloo: sums, gradient buckets, broadcast, any", "[distributed][gloo]") {
  const int port = free_port();
  pid_t child = fork_rank_one([port](int rank) {
    std::vector<std::string> failures = run_rank(rank, port);
    for (const std::string& failure : failures)
      std::fprintf(stderr, "rank 1: %s\n", failure.c_str());
    return failures.empty() ? 0 : 1;
  });
  std::vector<std::string> failures;
  try {
    failures = run_rank(0, port);
  } catch (const std::exception& error) {
    ::kill(child, SIGKILL);  // it would only wait for rank 0 until its timeout
    wait_for(child);
    FAIL("rank 0 threw: " << error.what());
  }
  for (const std::string& failure : failures) FAIL_CHECK("rank 0: " << failure);
  int status = wait_for(child);
  INFO("rank 1 reports its failures on stderr");
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a rank that died makes the next collective fail with one line", "[distributed][gloo]") {
  const int port = free_port();
  pid_t child = fork_rank_one([port](int rank) {
    auto comm = Communicator::create(two_rank_env(rank, port), CommBackend::kGloo, c10::kCPU,
                                     std::chrono::seconds(30));
    return 0;  // leaves without a collective, as a crashed rank would
  });
  auto comm = Communicator::create(two_rank_env(0, port), CommBackend::kGloo, c10::kCPU,
                                   std::chrono::seconds(30));
  int status = wait_for(child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  require_error([&] { comm->all_reduce_sum(1.0); }, {"all_reduce_sum", "rank 0"});
}

TEST_CASE("a port already in use fails at once, naming the address", "[distributed][gloo]") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const int port = ntohs(address.sin_port);
  require_error(
      [&] {
        Communicator::create(two_rank_env(0, port), CommBackend::kGloo, c10::kCPU,
                             std::chrono::seconds(5));
      },
      {"rendezvous at 127.0.0.1:" + std::to_string(port), "rank 0"});
  ::close(fd);
}

// --- Environment detection -------------------------------------------------------------------

namespace {

EnvLookup env_of(std::map<std::string, std::string> variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

const std::map<std::string, std::string> kSlurmJob = {{"SLURM_NTASKS", "8"},
                                                      {"SLURM_PROCID", "5"},
                                                      {"SLURM_LOCALID", "1"},
                                                      {"SLURM_NODEID", "1"},
                                                      {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                                      {"SLURM_JOB_NODELIST", "gpu[01-04,07],cpu3"},
                                                      {"SLURM_JOB_ID", "1234567"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> base,
                                        const std::map<std::string, std::string>& changes) {
  for (const auto& [name, value] : changes) {
    if (value == "<unset>") {
      base.erase(name);
    } else {
      base[name] = value;
    }
  }
  return base;
}

}  // namespace

TEST_CASE("no launcher variables: a single process", "[distributed][env]") {
  for (const auto& variables : std::vector<std::map<std::string, std::string>>{
           {},
           {{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "garbage"}},  // one-task job: nothing to join
           {{"RANK", ""}, {"WORLD_SIZE", ""}}}) {                 // empty counts as unset
    DistributedEnv env = detect_distributed_env(env_of(variables));
    CHECK(env.launcher == "single");
    CHECK(env.rank == 0);
    CHECK(env.world_size == 1);
    CHECK(env.local_rank == 0);
    CHECK(env.local_world_size == 1);
  }
}

TEST_CASE("torchrun variables", "[distributed][env]") {
  DistributedEnv env = detect_distributed_env(env_of({{"RANK", "6"},
                                                      {"WORLD_SIZE", "8"},
                                                      {"LOCAL_RANK", "2"},
                                                      {"LOCAL_WORLD_SIZE", "4"},
                                                      {"MASTER_ADDR", "node17"},
                                                      {"MASTER_PORT", "29411"},
                                                      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                      {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  CHECK(env.launcher == "torchrun");
  CHECK(env.rank == 6);
  CHECK(env.world_size == 8);
  CHECK(env.local_rank == 2);
  CHECK(env.local_world_size == 4);
  CHECK(env.master_addr == "node17");
  CHECK(env.master_port == 29411);
  CHECK(env.agent_store);
  CHECK(env.restart_count == 2);

  SECTION("defaults: one node, 127.0.0.1:29500, rank 0 serves the store") {
    DistributedEnv minimal = detect_distributed_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "3"}}));
    CHECK(minimal.local_rank == 1);
    CHECK(minimal.local_world_size == 3);
    CHECK(minimal.master_addr == "127.0.0.1");
    CHECK(minimal.master_port == 29500);
    CHECK_FALSE(minimal.agent_store);
  }
  SECTION("torchrun wins over the SLURM job around it") {
    DistributedEnv inside =
        detect_distributed_env(env_of(with(kSlurmJob, {{"RANK", "0"}, {"WORLD_SIZE", "2"}})));
    CHECK(inside.launcher == "torchrun");
    CHECK(inside.world_size == 2);
  }
}

TEST_CASE("torchrun variables: errors name the variable", "[distributed][env]") {
  const std::map<std::string, std::string> good = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
  auto detect = [&](const std::map<std::string, std::string>& changes) {
    return [&, changes] { detect_distributed_env(env_of(with(good, changes))); };
  };
  require_error(detect({{"RANK", "one"}}), {"RANK='one'", "not an integer"});
  require_error(detect({{"RANK", "1x"}}), {"RANK='1x'"});
  require_error(detect({{"WORLD_SIZE", "0"}}), {"WORLD_SIZE=0", "out of range"});
  require_error(detect({{"RANK", "2"}}), {"RANK=2", "WORLD_SIZE=2"});
  require_error(detect({{"RANK", "-1"}}), {"RANK=-1"});
  require_error(detect({{"WORLD_SIZE", "<unset>"}}), {"WORLD_SIZE is not set"});
  require_error(detect({{"RANK", "<unset>"}}), {"RANK is not set"});
  require_error(detect({{"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}}),
                {"LOCAL_RANK=3", "LOCAL_WORLD_SIZE=2"});
  require_error(detect({{"LOCAL_WORLD_SIZE", "4"}}), {"LOCAL_WORLD_SIZE=4", "WORLD_SIZE=2"});
  require_error(detect({{"MASTER_PORT", "70000"}}), {"MASTER_PORT=70000", "out of range"});
  require_error(detect({{"MASTER_PORT", "http"}}), {"MASTER_PORT='http'"});
  require_error(detect({{"TORCHELASTIC_RESTART_COUNT", "x"}}), {"TORCHELASTIC_RESTART_COUNT"});
}

TEST_CASE("SLURM variables", "[distributed][env]") {
  DistributedEnv env = detect_distributed_env(env_of(kSlurmJob));
  CHECK(env.launcher == "slurm");
  CHECK(env.rank == 5);
  CHECK(env.world_size == 8);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 4);
  CHECK(env.master_addr == "gpu01");
  CHECK(env.master_port == 34567);  // 20000 + 1234567 mod 20000
  CHECK_FALSE(env.agent_store);

  SECTION("MASTER_ADDR and MASTER_PORT win") {
    DistributedEnv given = detect_distributed_env(
        env_of(with(kSlurmJob, {{"MASTER_ADDR", "login2"}, {"MASTER_PORT", "12345"}})));
    CHECK(given.master_addr == "login2");
    CHECK(given.master_port == 12345);
  }
  SECTION("SLURM_NTASKS_PER_NODE wins over SLURM_TASKS_PER_NODE") {
    CHECK(detect_distributed_env(
              env_of(with(kSlurmJob, {{"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_LOCALID", "1"}})))
              .local_world_size == 2);
  }
  SECTION("the node's own entry of SLURM_TASKS_PER_NODE") {
    auto on_node = [](const std::string& node) {
      return detect_distributed_env(env_of(with(kSlurmJob, {{"SLURM_TASKS_PER_NODE", "3(x2),2"},
                                                            {"SLURM_NODEID", node},
                                                            {"SLURM_NTASKS", "8"}})))
          .local_world_size;
    };
    CHECK(on_node("0") == 3);
    CHECK(on_node("1") == 3);
    CHECK(on_node("2") == 2);
  }
  SECTION("the older SLURM_NODELIST") {
    CHECK(detect_distributed_env(env_of(with(kSlurmJob, {{"SLURM_JOB_NODELIST", "<unset>"},
                                                         {"SLURM_NODELIST", "n[100-131]"}})))
              .master_addr == "n100");
  }
}

TEST_CASE("SLURM variables: errors name the variable", "[distributed][env]") {
  auto detect = [](const std::map<std::string, std::string>& changes) {
    return [changes] { detect_distributed_env(env_of(with(kSlurmJob, changes))); };
  };
  require_error(detect({{"SLURM_PROCID", "<unset>"}}), {"SLURM_PROCID is not set", "srun"});
  require_error(detect({{"SLURM_PROCID", "8"}}), {"SLURM_PROCID=8", "SLURM_NTASKS=8"});
  require_error(detect({{"SLURM_NTASKS", "many"}}), {"SLURM_NTASKS='many'"});
  require_error(detect({{"SLURM_LOCALID", "4"}}), {"SLURM_LOCALID=4"});
  require_error(detect({{"SLURM_LOCALID", "<unset>"}}), {"SLURM_LOCALID is not set"});
  require_error(detect({{"SLURM_TASKS_PER_NODE", "<unset>"}}),
                {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  require_error(detect({{"SLURM_NODEID", "2"}}), {"SLURM_TASKS_PER_NODE='4(x2)'", "node 2"});
  require_error(detect({{"SLURM_JOB_NODELIST", "gpu[01-04"}}), {"SLURM_JOB_NODELIST", "'['"});
  require_error(detect({{"SLURM_JOB_NODELIST", "<unset>"}}), {"MASTER_ADDR", "SLURM_NODELIST"});
  require_error(detect({{"SLURM_JOB_ID", "12a"}}), {"SLURM_JOB_ID='12a'"});
  require_error(detect({{"SLURM_JOB_ID", "<unset>"}}), {"MASTER_PORT", "SLURM_JOB_ID"});
}

TEST_CASE("first host of a compressed Slurm node list", "[distributed][env]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpu[01-04,07],cpu3", "gpu01"},
      {"node7", "node7"},
      {"a,b", "a"},
      {"gpu[10,02]", "gpu10"},  // the first listed, not the smallest
      {"n[7]", "n7"},
      {"rack[2-3]-n[05-06]", "rack2-n05"},
      {"x[001-100]-ib,y", "x001-ib"},
      {"node.example.org", "node.example.org"}};
  for (const auto& [list, host] : cases) {
    INFO(list);
    CHECK(first_slurm_host(list, "SLURM_JOB_NODELIST") == host);
  }
  for (std::string bad :
       {"gpu[01-04", "gpu]", "gpu[a-b]", "gpu[4-1]", ",gpu1", "gpu[]", "a[[1]]", "gpu[1,]", ""}) {
    INFO(bad);
    require_error([&] { first_slurm_host(bad, "SLURM_JOB_NODELIST"); }, {"SLURM_JOB_NODELIST"});
  }
}

TEST_CASE("tasks of one node in SLURM_TASKS_PER_NODE", "[distributed][env]") {
  CHECK(slurm_tasks_on_node("4(x2),3", 0, "V") == 4);
  CHECK(slurm_tasks_on_node("4(x2),3", 1, "V") == 4);
  CHECK(slurm_tasks_on_node("4(x2),3", 2, "V") == 3);
  CHECK(slurm_tasks_on_node("2", 0, "V") == 2);
  CHECK(slurm_tasks_on_node("1,5(x1)", 1, "V") == 5);
  require_error([] { slurm_tasks_on_node("4(x2),3", 3, "V"); }, {"V='4(x2),3'", "3 nodes"});
  for (std::string bad : {"x", "4(x)", "4(x2", "4(2)", "0", "", "4(x0)"}) {
    INFO(bad);
    require_error([&] { slurm_tasks_on_node(bad, 0, "V"); }, {"V"});
  }
}

// --- Backend choice and the single-process communicator -------------------------------------

TEST_CASE("communication backend names", "[distributed]") {
  CHECK(rqat::parse_enum<CommBackend>("auto", "--backend") == CommBackend::kAuto);
  CHECK(rqat::parse_enum<CommBackend>("gloo", "--backend") == CommBackend::kGloo);
  CHECK(rqat::parse_enum<CommBackend>("nccl", "--backend") == CommBackend::kNccl);
  require_error([] { rqat::parse_enum<CommBackend>("mpi", "--backend"); }, {"--backend", "'mpi'"});
}

TEST_CASE("one process: no group, every collective a no-op", "[distributed]") {
  auto comm = Communicator::create(DistributedEnv{}, CommBackend::kAuto, c10::kCPU);
  CHECK(comm->rank() == 0);
  CHECK(comm->world_size() == 1);
  CHECK(comm->is_main());
  CHECK(comm->all_reduce_sum(2.5) == 2.5);
  CHECK(comm->all_reduce_sum(int64_t{-7}) == -7);
  CHECK(comm->any(true));
  CHECK_FALSE(comm->any(false));
  auto gen = generator(7);
  at::Tensor a = at::randn({3, 2}, gen, at::kFloat);
  std::vector<at::Tensor> tensors{a.clone()};
  comm->all_reduce_sum(tensors);
  comm->broadcast_from_main(tensors);
  CHECK(at::equal(tensors[0], a));
  std::vector<at::Tensor> flags{at::ones({2}, at::kBool)};
  require_error([&] { comm->all_reduce_sum(flags); }, {"all_reduce_sum", "bool"});
  at::Tensor parameter = at::zeros({2}, at::kFloat).set_requires_grad(true);
  comm->all_reduce_gradients({parameter});
  CHECK_FALSE(parameter.grad().defined());
  comm->barrier();
  CHECK(comm->collective_count() == 0);
}

TEST_CASE("communicator arguments are checked before any network use", "[distributed]") {
  require_error([] { Communicator::create(DistributedEnv{}, CommBackend::kNccl, c10::kCPU); },
                {"--backend nccl", "CUDA device"});
  DistributedEnv bad;
  bad.rank = 2;
  bad.world_size = 2;
  require_error([&] { Communicator::create(bad, CommBackend::kGloo, c10::kCPU); }, {"rank 2"});
  require_error(
      [] {
        Communicator::create(DistributedEnv{}, CommBackend::kGloo, c10::kCPU,
                             std::chrono::seconds(0));
      },
      {"timeout"});
#if !defined(RQAT_WITH_CUDA)
  require_error(
      [] {
        Communicator::create(DistributedEnv{}, CommBackend::kNccl, c10::Device(c10::kCUDA, 0));
      },
      {"--backend nccl", "CUDA build"});
#endif
}

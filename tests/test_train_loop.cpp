// The training loop's parts against closed forms and against itself: learning-rate schedules,
// weight-decay groups, optimizer state round trips, activation checkpointing (same gradients as a
// plain backward), gradient accumulation (same losses as one big micro-batch), a run stopped by a
// signal and resumed (bit-identical losses and weights to an uninterrupted run on the CPU), the
// NaN guard (stops, names the step, keeps the last good checkpoint) and the metrics files.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include "catch.h"

#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <numbers>
#include <random>
#include <sstream>

#include "io/hdf5_columns.h"
#include "model/decoder.h"
#include "quant/fake_quant_linear.h"
#include "test_util.h"
#include "train/qat_model.h"
#include "io/stop_request.h"
#include "train/token_nll.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

using namespace rqat;
using namespace rqat::train;
using namespace rqat::data;

TEST_CASE("learning-rate schedules follow their closed forms", "[lr]") {
  LrSchedule s;
  s.peak_lr = 2e-3;
  s.warmup_steps = 4;
  s.total_steps = 24;
  s.min_lr_ratio = 0.1;
  for (int64_t step = 0; step < 4; ++step) CHECK(s.at(step) == Approx(2e-3 * (step + 1) / 4.0));
  for (auto decay : {LrDecay::kConstant, LrDecay::kLinear, LrDecay::kCosine}) {
    s.decay = decay;
    for (int64_t step = 4; step < 24; ++step) {
      const double p = (step - 4) / 19.0;
      double want = 2e-3;
      if (decay == LrDecay::kLinear) want = 2e-3 * (1 - 0.9 * p);
      if (decay == LrDecay::kCosine)
        want = 2e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * p)));
      CHECK(s.at(step) == Approx(want).epsilon(1e-12));
    }
  }
  s.decay = LrDecay::kCosine;
  CHECK(s.at(23) == Approx(2e-4));  // the last step reaches the floor
  test::require_error([] { rqat::parse_enum<LrDecay>("step", "--schedule"); },
                      {"--schedule", "step"});
  // Hugging Face's warmup (TRL's, study A's warmup of 1): update 0 at lr 0, then the same decay.
  LrSchedule hf = s;
  hf.warmup_from_zero = true;
  for (int64_t step = 0; step < 4; ++step) CHECK(hf.at(step) == Approx(2e-3 * step / 4.0));
  CHECK(hf.at(0) == 0.0);
  for (int64_t step = 4; step < 24; ++step) CHECK(hf.at(step) == s.at(step));

  LrSchedule bad = s;
  bad.min_lr_ratio = 2;
  test::require_error([&] { bad.validate(); }, {"--min-lr-ratio"});
}

namespace {

quant::QuantSpec per_channel_spec(int bits) {
  quant::QuantSpec spec;
  spec.bits = bits;
  spec.group_size = -1;
  return spec;
}

std::shared_ptr<model::CausalLM> fake_quant_student(uint64_t seed) {
  auto model = test::random_tiny_model(model::Family::kQwen3, /*tied=*/false, seed);
  attach_fake_quant_rtn(*model, per_channel_spec(3), {});
  return model;
}

// Random sequences of mixed lengths (so batches are padded), every token a target.
SequenceSet random_sequences(int64_t count, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  SequenceSet set;
  set.layout = SequenceLayout::kBucketed;
  set.max_length = 12;
  for (int64_t i = 0; i < count; ++i) {
    TrainingSequence s;
    const int64_t length = 6 + static_cast<int64_t>(rng() % 7);
    for (int64_t t = 0; t < length; ++t) {
      s.tokens.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
      s.loss_mask.push_back(1);
    }
    set.total_tokens += length;
    set.target_tokens += length - 1;
    set.sequences.push_back(std::move(s));
  }
  return set;
}

struct RunOutcome {
  std::vector<double> losses;  // the "train" rows, in order
  io::NamedTensors state;      // the module state at the end
  TrainerResult result;
};

struct RunSettings {
  int64_t steps = 6;
  int64_t micro_batch = 0;
  int64_t checkpoint_every = 0;
  bool resume = false;
  int stop_during_step = 0;  // simulate SIGTERM while computing this step (1-based)
  int nan_at_step = 0;       // the loss becomes NaN at this step (1-based)
  bool activation_checkpointing = false;
};

RunOutcome train_tiny(const std::filesystem::path& out, const RunSettings& settings) {
  auto model = fake_quant_student(3);
  model->set_activation_checkpointing(settings.activation_checkpointing);
  const SequenceSet data = random_sequences(20, model->config().vocab_size, 11);
  TrainingOptimizer optimizer(trainable_parameters(*model),
                              AdamWSettings{.lr = 1e-3, .weight_decay = 0.1});
  auto comm = Communicator::create(DistributedEnv{}, CommBackend::kAuto, c10::kCPU);
  StepMetricsLog metrics(out, true);
  TrainerOptions options;
  options.out_dir = out;
  options.steps = settings.steps;
  options.batch_size = 4;
  options.micro_batch_size = settings.micro_batch;
  options.seed = 5;
  options.lr.peak_lr = 3e-3;
  options.lr.warmup_steps = 2;
  options.checkpoint_every = settings.checkpoint_every;
  options.resume = settings.resume;
  options.show_progress = false;
  options.fingerprint = {{"test", "train_tiny"}};
  Trainer trainer(*model, optimizer, data, *comm, metrics, options);
  int64_t step = 0, calls_in_step = 0,
          micro_per_step = settings.micro_batch ? 4 / settings.micro_batch : 1;
  if (settings.resume) {
    if (auto c = find_latest_checkpoint(out)) step = c->step;
  }
  const MicroBatchLossFn loss_fn = [&](const TokenBatch& batch, double step_targets) {
    if (calls_in_step++ % micro_per_step == 0) ++step;
    if (step == settings.stop_during_step) io::StopRequest::simulate(SIGTERM);
    const at::Tensor logits = model->forward(batch.input_ids, batch.attention_mask);
    const MaskedNllSum nll = masked_next_token_nll(logits, batch.input_ids, batch.loss_mask);
    MicroBatchLoss out;
    out.loss = nll.sum / step_targets;
    if (step == settings.nan_at_step)
      out.loss = out.loss * std::numeric_limits<double>::quiet_NaN();
    out.sums["ce"] = nll.sum.item<double>();
    return out;
  };
  std::ostringstream log;
  RunOutcome outcome;
  outcome.result = trainer.run(loss_fn, nullptr, log);
  for (const auto& [series, row] : metrics.rows())
    if (series == "train") outcome.losses.push_back(row["loss"].get<double>());
  outcome.state = module_state(*model);
  return outcome;
}

// A state's tensors by name, as load_state reads a checkpoint (undefined when absent).
std::function<at::Tensor(const std::string&)> lookup_in(const io::NamedTensors& state) {
  return [&state](const std::string& name) {
    for (const auto& [n, t] : state)
      if (n == name) return t;
    return at::Tensor();
  };
}

void require_same_state(const io::NamedTensors& a, const io::NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].first == b[i].first);
    REQUIRE(at::equal(a[i].second, b[i].second));
  }
}

}  // namespace

TEST_CASE("weight decay applies to weight matrices only; frozen parameters are left out",
          "[optimizer]") {
  auto model = fake_quant_student(1);
  const auto params = trainable_parameters(*model);
  bool saw_norm = false, saw_master = false;
  for (const auto& p : params) {
    INFO(p.name);
    REQUIRE(p.tensor.requires_grad());
    CHECK_FALSE(p.name.ends_with(".scales"));  // frozen scales are registered but not trained
    CHECK(p.decay == (p.tensor.dim() >= 2 && p.name.ends_with(".weight")));
    if (p.name.find("norm") != std::string::npos) {
      saw_norm = true;
      CHECK_FALSE(p.decay);
    }
    if (p.name == "model.layers.0.mlp.up_proj.weight") {
      saw_master = true;
      CHECK(p.decay);
    }
  }
  CHECK(saw_norm);
  CHECK(saw_master);
}

TEST_CASE("AdamW state round-trips through named tensors and continues identically",
          "[optimizer]") {
  auto make = [] {
    torch::manual_seed(0);
    auto w = torch::randn({5, 3}).requires_grad_(true);
    auto b = torch::randn({5}).requires_grad_(true);
    return std::vector<NamedParameter>{{"l.weight", w, true}, {"l.bias", b, false}};
  };
  auto loss_of = [](const std::vector<NamedParameter>& p, int i) {
    return (p[0].tensor.sum(1) * (i + 1) + p[1].tensor).pow(2).sum();
  };
  auto a = make();
  TrainingOptimizer opt_a(a, {.lr = 1e-2, .weight_decay = 0.5});
  for (int i = 0; i < 3; ++i) {
    opt_a.zero_grad();
    loss_of(a, i).backward();
    opt_a.step();
  }
  const auto saved = opt_a.state_tensors();
  auto b = make();
  {
    torch::NoGradGuard g;
    b[0].tensor.copy_(a[0].tensor);
    b[1].tensor.copy_(a[1].tensor);
  }
  TrainingOptimizer opt_b(b, {.lr = 1e-2, .weight_decay = 0.5});
  opt_b.load_state(lookup_in(saved), "test");
  for (int i = 3; i < 5; ++i) {
    for (auto* pair : {&a, &b}) {
      auto& opt = pair == &a ? opt_a : opt_b;
      opt.zero_grad();
      loss_of(*pair, i).backward();
      opt.step();
    }
  }
  CHECK(at::equal(a[0].tensor, b[0].tensor));
  CHECK(at::equal(a[1].tensor, b[1].tensor));
  CHECK(opt_a.parameter_count() == 20);  // 5x3 weight + 5 bias

  // Weight decay: with a zero gradient Adam's step is 0, so only the decayed matrix moves, by
  // exactly the factor 1 - lr * weight_decay.
  auto c = make();
  const at::Tensor w0 = c[0].tensor.detach().clone(), b0 = c[1].tensor.detach().clone();
  TrainingOptimizer opt_c(c, {.lr = 1e-2, .weight_decay = 0.5});
  opt_c.zero_grad();
  (c[0].tensor.sum() * 0 + c[1].tensor.sum() * 0).backward();
  opt_c.step();
  CHECK(at::allclose(c[0].tensor, w0 * (1 - 1e-2 * 0.5), 0, 1e-7));
  CHECK(at::equal(c[1].tensor, b0));
}

TEST_CASE("activation checkpointing gives the gradients of a plain backward", "[checkpointing]") {
  for (bool frozen_embeddings : {false, true}) {
    INFO("frozen embeddings " << frozen_embeddings);
    auto plain = fake_quant_student(9);
    auto checkpointed = fake_quant_student(9);
    checkpointed->set_activation_checkpointing(true);
    if (frozen_embeddings) {
      plain->model->embed_tokens->weight.requires_grad_(false);
      checkpointed->model->embed_tokens->weight.requires_grad_(false);
    }
    torch::manual_seed(4);
    const auto ids = torch::randint(0, plain->config().vocab_size, {3, 9});
    const auto mask =
        torch::ones({3, 9}, torch::kLong).index_put_({0, torch::indexing::Slice(0, 2)}, 0);
    for (auto* m : {plain.get(), checkpointed.get()})
      masked_next_token_nll(m->forward(ids, mask), ids, mask).sum.backward();
    const auto a = trainable_parameters(*plain), b = trainable_parameters(*checkpointed);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].name);
      REQUIRE(b[i].tensor.grad().defined());
      const double scale = a[i].tensor.grad().abs().max().item<double>();
      const double diff = (a[i].tensor.grad() - b[i].tensor.grad()).abs().max().item<double>();
      INFO("max |grad| " << scale << ", max difference " << diff);
      CHECK(diff <= 1e-5 * scale + 1e-9);
    }
  }
}

TEST_CASE("gradient accumulation over micro-batches reproduces one large batch", "[trainer]") {
  test::TempDir one("train_one"), four("train_four");
  const auto whole = train_tiny(one.path(), {.steps = 5});
  const auto micro = train_tiny(four.path(), {.steps = 5, .micro_batch = 1});
  REQUIRE(whole.losses.size() == 5);
  REQUIRE(micro.losses.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(micro.losses[i] == Approx(whole.losses[i]).epsilon(1e-5));
  CHECK(whole.losses.back() < whole.losses.front());  // it learns something
}

TEST_CASE("a run stopped by SIGTERM and resumed matches an uninterrupted run bit for bit",
          "[trainer][resume]") {
  test::TempDir straight("train_straight"), broken("train_broken");
  const auto reference = train_tiny(straight.path(), {.steps = 7, .checkpoint_every = 3});
  REQUIRE(reference.result.steps_done == 7);
  REQUIRE(reference.losses.size() == 7);

  const auto first =
      train_tiny(broken.path(), {.steps = 7, .checkpoint_every = 3, .stop_during_step = 5});
  CHECK(first.result.stopped_by_signal == SIGTERM);
  CHECK(first.result.steps_done == 5);
  REQUIRE(first.result.last_checkpoint.filename() == "step-00000005");
  REQUIRE(find_latest_checkpoint(broken.path())->step == 5);

  const auto second =
      train_tiny(broken.path(), {.steps = 7, .checkpoint_every = 3, .resume = true});
  CHECK(second.result.start_step == 5);
  CHECK(second.result.steps_done == 7);
  REQUIRE(second.losses.size() == 7);  // the metrics history continues the first part's
  for (size_t i = 0; i < 7; ++i) {
    INFO("step " << i + 1);
    CHECK(second.losses[i] == reference.losses[i]);
  }
  require_same_state(second.state, reference.state);
  // The files hold one row per step, too.
  std::ifstream jsonl(broken / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(jsonl, line);) lines += !line.empty();
  CHECK(lines == 7);
  const auto h5 = io::Hdf5Columns::read(broken / "metrics.h5");
  CHECK(std::get<std::vector<int64_t>>(h5.columns().at("train/step")).size() == 7);
  CHECK(std::get<std::vector<double>>(h5.columns().at("train/loss")).back() ==
        reference.losses.back());
}

TEST_CASE("resuming with another configuration is refused", "[trainer][resume]") {
  test::TempDir dir("train_fingerprint");
  train_tiny(dir.path(), {.steps = 2});
  auto model = fake_quant_student(3);
  const SequenceSet data = random_sequences(20, model->config().vocab_size, 11);
  TrainingOptimizer optimizer(trainable_parameters(*model), {});
  auto comm = Communicator::create(DistributedEnv{}, CommBackend::kAuto, c10::kCPU);
  StepMetricsLog metrics(dir.path(), true);
  TrainerOptions options;
  options.out_dir = dir.path();
  options.steps = 4;
  options.batch_size = 4;
  options.resume = true;
  options.fingerprint = {{"test", "something else"}};
  Trainer trainer(*model, optimizer, data, *comm, metrics, options);
  std::ostringstream log;
  test::require_error(
      [&] {
        trainer.run([](const TokenBatch&, double) { return MicroBatchLoss{}; }, nullptr, log);
      },
      {"--resume", "test"});
}

TEST_CASE("a NaN loss stops the run before the update and keeps the last good checkpoint",
          "[trainer][nan]") {
  test::TempDir dir("train_nan");
  test::require_error(
      [&] { train_tiny(dir.path(), {.steps = 6, .checkpoint_every = 2, .nan_at_step = 4}); },
      {"step 4", "loss is nan", "step-00000002"});
  const auto last = find_latest_checkpoint(dir.path());
  REQUIRE(last);
  CHECK(last->step == 2);
}

TEST_CASE("a weight decay of exactly 0.01 (libtorch's default) is applied", "[optimizer]") {
  // libtorch's param-group merge took a group's 0.01 for "unset" and put the defaults' 0 there.
  torch::manual_seed(0);
  auto w = torch::randn({4, 3}).requires_grad_(true);
  const at::Tensor w0 = w.detach().clone();
  TrainingOptimizer optimizer({{"l.weight", w, true}}, {.lr = 1e-2, .weight_decay = 0.01});
  (w.sum() * 0).backward();
  optimizer.step();
  CHECK(at::allclose(w, w0 * (1 - 1e-2 * 0.01), 0, 1e-7));
  CHECK(!at::equal(w, w0));
}

TEST_CASE("sharded state on one process trains as the unsharded optimizer", "[optimizer][shard]") {
  // One process exercises every code path of sharding but the collectives (tests/python/
  // test_shard_cli.py runs 2 and 4 Gloo processes): the flat layout and slices, the layer scope
  // (gather/free around each layer's forward and backward), AdamW on slices with decay on the
  // weight matrices only, clipping by the global norm, the checkpoint state and unsharding.
  auto comm = Communicator::create(DistributedEnv{}, CommBackend::kAuto, c10::kCPU);
  const AdamWSettings adamw{.lr = 1e-2, .weight_decay = 0.01};
  const auto loss_of = [](model::CausalLM& model, int step) {
    const at::Tensor ids = at::arange(2 * 7, at::kLong).view({2, 7}).add(step).remainder(
        model.config().vocab_size);
    return model.forward(ids).log_softmax(-1).select(-1, 3).mean().neg();
  };
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kParameters}) {
    INFO("--shard " << enum_name(mode));
    auto plain = fake_quant_student(21);
    auto sharded = fake_quant_student(21);
    // Layer-scoped modes run layers under activation checkpointing: the same arithmetic here.
    plain->set_activation_checkpointing(mode != ShardMode::kOptimizer);
    TrainingOptimizer plain_opt(trainable_parameters(*plain), adamw);
    TrainingOptimizer sharded_opt(trainable_parameters(*sharded), adamw,
                                  ShardOptions{mode, comm.get(), at::kFloat});
    if (auto* scope = sharded_opt.layer_scope()) sharded->set_layer_scope(scope);
    CHECK((sharded_opt.layer_scope() != nullptr) == (mode != ShardMode::kOptimizer));
    sharded_opt.weights_ready();
    const auto& q_proj = sharded->layer(0).self_attn->q_proj;
    const int64_t layer_weights = q_proj->parameters().front().numel();
    if (mode == ShardMode::kParameters) CHECK(layer_weights == 0);  // freed until the layer runs
    else CHECK(layer_weights > 0);
    for (int step = 0; step < 4; ++step) {
      double norms[2];
      for (int k = 0; k < 2; ++k) {
        auto& model = k == 0 ? *plain : *sharded;
        auto& opt = k == 0 ? plain_opt : sharded_opt;
        opt.zero_grad();
        loss_of(model, step).backward();
        opt.reduce_gradients(*comm);
        norms[k] = opt.clip_grad_norm(0.05);  // small enough to clip every step
        opt.step();
      }
      CHECK(norms[1] == Approx(norms[0]).epsilon(1e-5));
      CHECK(norms[0] > 0.05);
    }
    // The checkpointed state, restored into an unsharded optimizer, continues identically.
    const io::NamedTensors state = sharded_opt.state_tensors();
    const io::NamedTensors masters = sharded_opt.master_weights();
    REQUIRE(masters.size() == trainable_parameters(*plain).size());
    auto restored = fake_quant_student(21);
    restored->set_activation_checkpointing(mode != ShardMode::kOptimizer);
    {
      torch::NoGradGuard no_grad;
      std::map<std::string, at::Tensor> by_name(masters.begin(), masters.end());
      for (auto& p : trainable_parameters(*restored)) p.tensor.copy_(by_name.at(p.name));
    }
    TrainingOptimizer restored_opt(trainable_parameters(*restored), adamw);
    restored_opt.load_state(lookup_in(state), "test");
    sharded_opt.unshard();
    for (auto* model : {plain.get(), restored.get()}) {
      auto& opt = model == plain.get() ? plain_opt : restored_opt;
      opt.zero_grad();
      loss_of(*model, 9).backward();
      opt.step();
    }
    const auto a = trainable_parameters(*plain), b = trainable_parameters(*restored),
               c = trainable_parameters(*sharded);
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].name);
      CHECK(at::allclose(b[i].tensor, a[i].tensor, 1e-5, 1e-6));
      CHECK(c[i].tensor.dtype() == at::kFloat);
      CHECK(c[i].tensor.sizes() == a[i].tensor.sizes());  // whole again after unshard()
    }
  }
}

TEST_CASE("sharded bf16 compute copies train against fp32 masters", "[optimizer][shard]") {
  // --dtype bf16 with --shard on CUDA: the module computes in bf16 while masters, gradient sums
  // and AdamW stay fp32. The CPU runs the same code; the loss must fall like the fp32 run's.
  auto comm = Communicator::create(DistributedEnv{}, CommBackend::kAuto, c10::kCPU);
  const AdamWSettings adamw{.lr = 1e-2};
  const at::Tensor ids = at::arange(14, at::kLong).view({2, 7}).remainder(32);
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kParameters}) {
    INFO("--shard " << enum_name(mode));
    auto model = fake_quant_student(4);
    TrainingOptimizer optimizer(trainable_parameters(*model), adamw,
                                ShardOptions{mode, comm.get(), at::kBFloat16});
    if (auto* scope = optimizer.layer_scope()) model->set_layer_scope(scope);
    optimizer.weights_ready();
    CHECK(model->model->norm->weight.dtype() == at::kBFloat16);
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      optimizer.zero_grad();
      at::Tensor loss;
      {
        // As the trainer's bf16 autocast on CUDA, here on the CPU: mixed dtypes (fp32 rotary
        // tables, bf16 weights) meet in autocast's casts.
        at::autocast::set_autocast_enabled(at::kCPU, true);
        at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
        at::autocast::increment_nesting();
        loss = model->forward(ids).to(at::kFloat).log_softmax(-1).select(-1, 3).mean().neg();
        if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        at::autocast::set_autocast_enabled(at::kCPU, false);
      }
      loss.backward();
      optimizer.reduce_gradients(*comm);
      CHECK(std::isfinite(optimizer.clip_grad_norm(1.0)));
      optimizer.step();
      losses.push_back(loss.item<double>());
    }
    CHECK(losses.back() < losses.front() - 0.5);
    const StateBytes bytes = optimizer.state_bytes(*model);
    CHECK(bytes.master == bytes.moments / 2);  // fp32 masters next to two fp32 moments
    optimizer.unshard();
    for (const auto& p : trainable_parameters(*model)) CHECK(p.tensor.dtype() == at::kFloat);
  }
}

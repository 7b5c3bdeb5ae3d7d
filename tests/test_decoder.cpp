// The decoder on random tiny models of each family (no Python needed): padding invariance, paged
// KV-cache decode against the full forward, block reuse for continuous batching, save/load round
// trips, zero-copy bf16 loading, Linear replacement, gradients, and loader errors.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <fstream>
#include <span>
#include <sstream>

#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model/decoder.h"
#include "model/init.h"
#include "model/model_dir.h"
#include "test_util.h"

using rqat::model::CausalLM;
using rqat::model::Family;
using rqat::test::TempDir;

namespace {

// f32 forward passes that differ only in summation order agree to ~1e-6 on logits of magnitude ~1;
// 1e-5 leaves room for a few more operations without hiding a wrong mask or position (those give
// differences of order 1e-1).
constexpr double kTol = 1e-5;

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

struct FamilyCase {
  Family family;
  bool tied;
};
const FamilyCase kCases[] = {{Family::kQwen2, false},
                             {Family::kQwen3, true},
                             {Family::kLlama, false},
                             {Family::kLlama, true}};

}  // namespace

TEST_CASE("left padding does not change a row's logits") {
  torch::NoGradGuard no_grad;
  for (const auto& c : kCases) {
    INFO(rqat::enum_name(c.family) << " tied=" << c.tied);
    auto model = rqat::test::random_tiny_model(c.family, c.tied);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    auto tokens = at::randint(0, 97, {1, 7}, gen, at::kLong);
    auto alone = model->forward(tokens);
    auto padded = at::cat({at::zeros({1, 4}, at::kLong), tokens}, 1);
    auto mask = at::cat({at::zeros({1, 4}, at::kLong), at::ones({1, 7}, at::kLong)}, 1);
    auto with_pad = model->forward(padded, mask);
    CHECK(max_diff(with_pad.narrow(1, 4, 7), alone) < kTol);
    CHECK(at::isfinite(with_pad).all().item<bool>());  // padding rows are junk but never NaN
  }
}

TEST_CASE("paged KV-cache prefill + one-token decode equals the full forward") {
  torch::NoGradGuard no_grad;
  for (const auto& c : kCases) {
    INFO(rqat::enum_name(c.family) << " tied=" << c.tied);
    auto model = rqat::test::random_tiny_model(c.family, c.tied);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const int64_t steps = 12, prompt = 5;
    auto ids = at::randint(0, 97, {3, steps}, gen, at::kLong);
    auto mask = at::ones({3, steps}, at::kLong);
    mask[1].narrow(0, 0, 2).zero_();  // rows 1 and 2 are left padded inside the prompt
    mask[2].narrow(0, 0, 4).zero_();
    auto full = model->forward(ids, mask);
    for (const int64_t block : {int64_t{1}, int64_t{4}, int64_t{16}}) {
      INFO("block size " << block);
      auto cached = rqat::test::paged_cached_logits(*model, ids, mask, prompt, block);
      CHECK(max_diff(cached.narrow(1, prompt - 1, steps - prompt + 1),
                     full.narrow(1, prompt - 1, steps - prompt + 1)) < kTol);
    }
  }
}

TEST_CASE("paged sequences are independent and reuse freed blocks (continuous batching)") {
  torch::NoGradGuard no_grad;
  auto model = rqat::test::random_tiny_model(Family::kQwen3, true);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  auto a = at::randint(0, 97, {1, 9}, gen, at::kLong);
  auto b = at::randint(0, 97, {1, 6}, gen, at::kLong);
  auto c = at::randint(0, 97, {1, 4}, gen, at::kLong);
  auto full_b = model->forward(b);
  auto full_c = model->forward(c);
  auto tokens = [](const at::Tensor& ids) {
    std::vector<int32_t> out;
    for (int64_t t = 0; t < ids.size(1); ++t)
      out.push_back(static_cast<int32_t>(ids[0][t].item<int64_t>()));
    return out;
  };
  const auto ta = tokens(a), tb = tokens(b), tc = tokens(c);
  const int64_t block = 2;
  auto cache = model->make_paged_cache(/*num_blocks=*/9, block);  // 8 usable: 16 positions
  rqat::model::PagedSequence sa, sb, sc;
  auto run = [&](std::vector<rqat::model::PagedSequence*> seqs,
                 std::vector<std::span<const int32_t>> toks) {
    return rqat::test::paged_forward(*model, cache, seqs, toks);
  };
  run({&sa}, {std::span(ta)});           // a long sequence: 5 blocks
  run({&sb}, {std::span(tb).first(3)});  // b's prompt: 2 blocks
  CHECK(cache.free_blocks() == 1);
  cache.release(sa);  // a finishes; c takes its blocks
  CHECK(cache.free_blocks() == 6);
  auto c_prefill = run({&sc}, {std::span(tc).first(2)});
  CHECK(max_diff(c_prefill[0], full_c[0][1]) < kTol);
  // Decode both together although they hold different lengths (2 and 3).
  for (int64_t t = 0; t < 2; ++t) {
    auto step = run({&sc, &sb}, {std::span(tc).subspan(2 + t, 1), std::span(tb).subspan(3 + t, 1)});
    CHECK(max_diff(step[0], full_c[0][2 + t]) < kTol);
    CHECK(max_diff(step[1], full_b[0][3 + t]) < kTol);
  }
  rqat::model::PagedSequence too_long;
  CHECK_FALSE(cache.reserve(too_long, 20));
  rqat::test::require_error(
      [&] { rqat::model::make_paged_step({&sb}, {std::span(tb)}, block, at::kCPU); },
      {"row 0", "needs 11 positions", "blocks for 6"});
}

TEST_CASE("save and load round-trip bit-exactly, single file and sharded") {
  torch::NoGradGuard no_grad;
  for (const auto& c : kCases) {
    INFO(rqat::enum_name(c.family) << " tied=" << c.tied);
    auto model = rqat::test::random_tiny_model(c.family, c.tied);
    auto ids = at::arange(10, at::kLong).view({1, 10});
    auto expected = model->forward(ids);
    for (uint64_t shard : {uint64_t{0}, uint64_t{20000}}) {
      TempDir dir("decoder_rt");
      rqat::model::SaveOptions save;
      save.max_shard_bytes = shard;
      rqat::model::save_causal_lm(*model, dir.path(), save);
      CHECK(std::filesystem::exists(dir / "model.safetensors.index.json") == (shard != 0));
      CHECK(std::filesystem::exists(dir / "generation_config.json"));
      auto loaded = rqat::model::load_causal_lm(dir.path());
      CHECK(at::equal(loaded->forward(ids), expected));
      CHECK(loaded->state_tensors().size() == model->state_tensors().size());
    }
  }
}

TEST_CASE("loading a bf16 checkpoint in bf16 maps the file instead of copying it") {
  auto model = rqat::test::random_tiny_model(Family::kLlama, false);
  TempDir dir("decoder_bf16");
  rqat::model::SaveOptions save;
  save.dtype = at::kBFloat16;
  rqat::model::save_causal_lm(*model, dir.path(), save);
  CHECK(rqat::io::read_json_file(dir / "config.json")["torch_dtype"] == "bfloat16");
  auto loaded = rqat::model::load_causal_lm(dir.path(), {at::kBFloat16, c10::kCPU});

  // Find the address range of the mapped weight file in /proc/self/maps.
  const std::string file = std::filesystem::canonical(dir / "model.safetensors").string();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  while (std::getline(maps, line)) {
    if (!line.ends_with(file)) continue;
    std::istringstream range(line.substr(0, line.find(' ')));
    std::string a, b;
    std::getline(range, a, '-');
    std::getline(range, b);
    lo = std::min<uintptr_t>(lo, std::stoull(a, nullptr, 16));
    hi = std::max<uintptr_t>(hi, std::stoull(b, nullptr, 16));
  }
  REQUIRE(hi > lo);
  int inside = 0, total = 0;
  for (const auto& p : loaded->parameters()) {
    const auto addr = reinterpret_cast<uintptr_t>(p.data_ptr());
    inside += (addr >= lo && addr < hi);
    ++total;
  }
  CHECK(inside == total);
  // And the bf16 model computes the same as the f32 model rounded to bf16 weights, within bf16
  // error.
  auto ids = at::arange(8, at::kLong).view({1, 8});
  auto f32 = rqat::model::load_causal_lm(dir.path(), {at::kFloat, c10::kCPU});
  torch::NoGradGuard no_grad;
  auto ref = f32->forward(ids);
  auto got = loaded->forward(ids).to(at::kFloat);
  CHECK(max_diff(got, ref) < 0.05 * ref.abs().max().item<double>());
}

TEST_CASE("every projection is a replaceable Linear") {
  auto model = rqat::test::random_tiny_model(Family::kQwen2, false);
  auto slots = model->linear_layers();
  CHECK(slots.size() == 7u * 2u);
  CHECK(slots.front().name == "model.layers.0.self_attn.q_proj");
  CHECK(slots.back().name == "model.layers.1.mlp.down_proj");
  CHECK(model->linear_layers(/*include_lm_head=*/true).back().name == "lm_head");

  torch::NoGradGuard no_grad;
  auto ids = at::arange(6, at::kLong).view({1, 6});
  auto before = model->forward(ids);
  auto zero =
      std::make_shared<rqat::model::DenseLinear>(48, 80, false, at::TensorOptions(at::kFloat));
  zero->named_parameters()["weight"].zero_();
  model->replace_linear(slots[4], zero);  // model.layers.0.mlp.gate_proj
  CHECK(model->named_parameters().contains("model.layers.0.mlp.gate_proj.weight"));
  CHECK(model->model->layers->ptr<rqat::model::DecoderLayer>(0)->mlp->gate_proj.get() ==
        zero.get());
  CHECK(max_diff(model->forward(ids), before) > 1e-3);
}

TEST_CASE("gradients reach every parameter") {
  auto model = rqat::test::random_tiny_model(Family::kQwen3, false);
  auto ids = at::arange(8, at::kLong).view({2, 4});
  auto logits = model->forward(ids);
  auto loss = at::cross_entropy_loss(logits.view({-1, 97}), ids.view({-1}));
  loss.backward();
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(at::isfinite(p.value().grad()).all().item<bool>());
    CHECK(p.value().grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("loader errors name the directory and tensor") {
  auto model = rqat::test::random_tiny_model(Family::kQwen2, false);
  TempDir dir("decoder_err");
  rqat::model::save_causal_lm(*model, dir.path());
  auto tensors = model->state_tensors();

  SECTION("missing tensor") {
    tensors.erase(tensors.begin() + 3);
    rqat::io::write_checkpoint(dir.path(), tensors, 0);
    rqat::test::require_error([&] { rqat::model::load_causal_lm(dir.path()); },
                              {dir.path().string(), "no tensor"});
  }
  SECTION("unexpected tensor") {
    tensors.emplace_back("model.layers.0.self_attn.q_proj.qweight", at::zeros({2}, at::kInt));
    rqat::io::write_checkpoint(dir.path(), tensors, 0);
    rqat::test::require_error([&] { rqat::model::load_causal_lm(dir.path()); },
                              {"unexpected tensor", "qweight"});
  }
  SECTION("shape that disagrees with config.json") {
    auto config = rqat::io::read_json_file(dir / "config.json");
    config["intermediate_size"] = 64;
    rqat::io::write_json_file(dir / "config.json", config);
    rqat::test::require_error([&] { rqat::model::load_causal_lm(dir.path()); },
                              {"mlp.gate_proj.weight", "shape"});
  }
  SECTION("no directory") {
    rqat::test::require_error([&] { rqat::model::load_causal_lm(dir / "nope"); },
                              {"nope", "does not exist"});
  }
}

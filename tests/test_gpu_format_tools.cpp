// The GPU serving formats through the tools (issue 46): ptq on --grid nvfp4 with --export
// compressed-tensors, imported back (`rqat convert --model <checkpoint>`) to the same weights bit
// for bit; qat-sft from it with learned scales, its export exact too; --act-grid recorded in the
// quant state (nvfp4's input global scales calibrated by the trainer) and computed by the loaded
// model, exported as NVFP4 W4A4 / W8A8 and imported back to the same logits; the refusals a user
// meets before any work; and a checkpoint made before --act-grid existed still resumes.
#include "catch.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>

#include "cli/ptq_config.h"
#include "cli/qat_config.h"
#include "cli/runtime_flags.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/model_dir.h"
#include "quant/activation_quant.h"
#include "quant/load_model.h"
#include "quant/quant_state.h"
#include "test_util.h"
#include "tools/compressed_tensors_command.h"
#include "tools/ptq_command.h"
#include "tools/qat_command.h"

using namespace rqat;

namespace {

// A byte-level model whose every matrix is a multiple of 32 wide: every GPU format holds it.
std::filesystem::path write_block_model(const test::TempDir& dir) {
  test::byte_level_test_tokenizer(dir);
  io::Json j = {{"model_type", "qwen3"},    {"hidden_size", 64},
                {"intermediate_size", 128}, {"num_hidden_layers", 2},
                {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                {"head_dim", 16},           {"vocab_size", 260},
                {"rms_norm_eps", 1e-6},     {"tie_word_embeddings", false},
                {"rope_theta", 10000.0},    {"max_position_embeddings", 128},
                {"eos_token_id", 258}};
  model::CausalLM model(model::ModelConfig::from_json(j, "tiny"), at::TensorOptions(at::kFloat));
  model::init_random(model, 3, 0.1);
  model::SaveOptions save;
  save.tokenizer_from = dir.path();
  model::save_causal_lm(model, dir / "model", save);
  return dir / "model";
}

template <class Config>
void parse(Config& config, std::vector<std::string> args) {
  CLI::App app("test");
  cli::add_config_flags(app, config);
  std::reverse(args.begin(), args.end());
  app.parse(args);
}

// Every tensor of two model.safetensors equal bit for bit.
void require_same_weights(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto fa = io::SafetensorsFile::open(a / "model.safetensors");
  const auto fb = io::SafetensorsFile::open(b / "model.safetensors");
  REQUIRE(fa->entries().size() == fb->entries().size());
  for (const auto& entry : fa->entries()) {
    INFO(entry.name);
    CHECK(at::equal(fa->tensor(entry.name).to(at::kFloat), fb->tensor(entry.name).to(at::kFloat)));
  }
}

tools::QatCommandResult run_sft(const test::TempDir& dir, const std::filesystem::path& model,
                                const std::string& out, std::vector<std::string> extra) {
  cli::QatConfig sft(tools::QatObjective::kSft);
  std::vector<std::string> args = {"--model",         model.string(),
                                   "--out",           (dir / out).string(),
                                   "--data",          (dir / "train.txt").string(),
                                   "--max-length",    "32",
                                   "--steps",         "2",
                                   "--batch-size",    "2",
                                   "--device",        "cpu",
                                   "--no-tensorboard"};
  args.insert(args.end(), extra.begin(), extra.end());
  parse(sft, args);
  auto options = sft.resolve();
  options.trainer.show_progress = false;
  std::ostringstream log;
  return tools::run_qat_command(options, log);
}

}  // namespace

TEST_CASE("gpu formats: ptq and qat-sft export compressed-tensors exactly; --act-grid is kept",
          "[qat][compressed-tensors]") {
  test::TempDir dir("gpu_format_tools");
  const auto model = write_block_model(dir);
  {
    std::ofstream text(dir / "train.txt");
    for (int i = 0; i < 40; ++i) text << "The sum of " << i << " and 2 is " << i + 2 << ".\n\n";
  }
  std::ostringstream log;

  // ptq on NVFP4, exported and imported back: the same weights.
  cli::PtqConfig ptq;
  parse(ptq, {"--model", model.string(), "--out", (dir / "ptq").string(), "--method", "rtn",
              "--grid", "nvfp4", "--export", "compressed-tensors", "--device", "cpu"});
  tools::run_ptq_command(ptq.resolve(), log);
  CHECK(io::read_json_file(dir / "ptq" / "manifest.json")["config"]["quant"]["grid"] == "nvfp4");
  const auto exported = dir / "ptq" / "compressed-tensors";
  CHECK(io::read_json_file(exported / "config.json")["quantization_config"]["format"] ==
        "nvfp4-pack-quantized");
  tools::import_compressed_tensors_dir(exported, dir / "ptq_back", log);
  require_same_weights(dir / "ptq", dir / "ptq_back");
  CHECK(quant::load_quant_state(dir / "ptq_back").spec.fp_grid == quant::FpGrid::kNvfp4);

  // qat-sft from it with learned E4M3 scales: its export is its weights too, and so is
  // `rqat convert --to compressed-tensors` of the artifact.
  REQUIRE(
      run_sft(dir, dir / "ptq", "qat", {"--scale-mode", "lsq", "--export", "compressed-tensors"})
          .exit_code == 0);
  tools::import_compressed_tensors_dir(dir / "qat" / "compressed-tensors", dir / "qat_back", log);
  require_same_weights(dir / "qat", dir / "qat_back");
  tools::convert_model_to_compressed_tensors(dir / "qat", dir / "qat_ct", log);
  tools::import_compressed_tensors_dir(dir / "qat_ct", dir / "qat_ct_back", log);
  require_same_weights(dir / "qat", dir / "qat_ct_back");

  // --act-grid added to the weight-only state: recorded, the input global scales calibrated on
  // the training data, and the loaded model computes with them; its compressed-tensors export
  // (NVFP4 W4A4) carries them and imports back to the same weights, scales and logits.
  REQUIRE(
      run_sft(dir, dir / "ptq", "w4a4", {"--act-grid", "nvfp4", "--export", "compressed-tensors"})
          .exit_code == 0);
  const quant::QuantState w4a4 = quant::load_quant_state(dir / "w4a4");
  CHECK(w4a4.spec.activations == quant::FpGrid::kNvfp4);
  for (const auto& [name, q] : w4a4.layers) {
    INFO(name);
    REQUIRE(q.input_global_scale.defined());
    CHECK(q.input_global_scale.item<float>() > 0);
  }
  const auto loaded = quant::load_model(dir / "w4a4");
  const auto slot = loaded->linear_layers(false).front();
  CHECK(std::dynamic_pointer_cast<quant::ActivationQuantLinear>(*slot.layer) != nullptr);
  const auto ct = io::read_json_file(dir / "w4a4" / "compressed-tensors" / "config.json");
  const auto& inputs = ct["quantization_config"]["config_groups"]["group_0"]["input_activations"];
  CHECK(inputs["strategy"] == "tensor_group");
  CHECK(inputs["dynamic"] == "local");
  tools::import_compressed_tensors_dir(dir / "w4a4" / "compressed-tensors", dir / "w4a4_back", log);
  require_same_weights(dir / "w4a4", dir / "w4a4_back");
  const quant::QuantState back = quant::load_quant_state(dir / "w4a4_back");
  CHECK(back.spec.activations == quant::FpGrid::kNvfp4);
  for (const auto& [name, q] : w4a4.layers) {
    INFO(name);
    CHECK(at::equal(back.layers.at(name).input_global_scale, q.input_global_scale));
  }
  const at::Tensor ids = at::tensor({84, 104, 101, 32, 115, 117, 109}, at::kLong).unsqueeze(0);
  CHECK(at::equal(quant::load_model(dir / "w4a4_back")->forward(ids), loaded->forward(ids)));

  // FP8 W8A8 (dynamic per-token activations, nothing to calibrate) exports too.
  REQUIRE(run_sft(dir, dir / "ptq", "w8a8_from_w4",
                  {"--act-grid", "fp8", "--export", "compressed-tensors"})
              .exit_code == 0);
  CHECK(io::read_json_file(dir / "w8a8_from_w4" / "compressed-tensors" /
                           "config.json")["quantization_config"]["config_groups"]["group_0"]
                                         ["input_activations"]["strategy"] == "token");

  // Refused before any work, naming the flag.
  cli::PtqConfig uncalibrated;
  parse(uncalibrated, {"--model", model.string(), "--out", (dir / "bad").string(), "--method",
                       "rtn", "--grid", "nvfp4", "--act-grid", "nvfp4", "--device", "cpu"});
  test::require_error([&] { tools::run_ptq_command(uncalibrated.resolve(), log); },
                      {"--act-grid nvfp4", "--calib"});
  CHECK_FALSE(std::filesystem::exists(dir / "bad"));
  // A layer that is not whole groups (the byte-level test model's 72-wide o_proj), before any work.
  test::TempDir odd_dir("gpu_format_tools_odd");
  const auto odd = test::write_byte_level_model(odd_dir);
  cli::PtqConfig partial;
  parse(partial, {"--model", odd.string(), "--out", (dir / "partial").string(), "--method", "rtn",
                  "--grid", "nvfp4", "--export", "compressed-tensors", "--device", "cpu"});
  test::require_error([&] { tools::run_ptq_command(partial.resolve(), log); },
                      {"--export compressed-tensors", "o_proj", "72 inputs", "groups of 16"});
  CHECK_FALSE(std::filesystem::exists(dir / "partial"));
  cli::PtqConfig gguf;
  parse(gguf, {"--model", model.string(), "--out", (dir / "bad2").string(), "--method", "rtn",
               "--grid", "gguf-q4_0", "--export", "compressed-tensors", "--device", "cpu"});
  test::require_error([&] { tools::run_ptq_command(gguf.resolve(), log); },
                      {"--export compressed-tensors", "gguf-q4_0"});
  CHECK_FALSE(std::filesystem::exists(dir / "bad2"));

  // A checkpoint from before --act-grid was declared (its options lack "act_grid") resumes.
  std::filesystem::path state_file;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir / "qat"))
    if (entry.path().filename() == "trainer_state.json") state_file = entry.path();
  REQUIRE(!state_file.empty());
  io::Json state = io::read_json_file(state_file);
  REQUIRE(state["fingerprint"]["options"].contains("act_grid"));
  state["fingerprint"]["options"].erase("act_grid");
  io::write_json_file(state_file, state);
  std::filesystem::remove_all(dir / "qat" / "compressed-tensors");
  CHECK(run_sft(dir, dir / "ptq", "qat",
                {"--scale-mode", "lsq", "--export", "compressed-tensors", "--resume"})
            .exit_code == 0);
}

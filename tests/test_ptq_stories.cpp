// PTQ on real trained weights: the llama2.c stories260K model (converted to Hugging Face format)
// quantized by RTN, GPTQ and AWQ at 2, 3 and 4 bits, per channel and with groups of 32 (its
// down_proj has 172 inputs: the last group holds 12 columns). Calibration: 32 of the model's own
// samples of 128 tokens; held-out: the TinyStories sample beside it. The held-out NLL must order
// sanely: FP < W4 < W3 < W2 for every method, and GPTQ and AWQ below RTN at 3 bits.
// docs/ptq.md records the table this test prints.
#include "catch.h"

#include <fmt/format.h>

#include <iostream>
#include <sstream>

#include "data/text_dataset.h"
#include "generation/generation_engine.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "quant/ptq.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/token_nll.h"

using namespace rqat;

TEST_CASE("stories260K: held-out NLL after RTN, GPTQ and AWQ at W2/W3/W4", "[ptq][stories]") {
  test::TempDir dir("ptq_stories");
  const auto model_dir = test::convert_stories260k(dir);
  if (!model_dir) return;
  const auto data = test::shared_data_dir() / "tinyllama";
  auto tokenizer = tokenizer::Tokenizer::load(*model_dir);

  // Held-out text, scored in windows of 256 tokens.
  data::TextDataOptions text;
  text.path = data / "tinystories_sample.txt";
  const auto held_out = data::load_tokenized_dataset(text, *tokenizer);
  const auto windows = train::score_windows(held_out, 256);

  // Calibration: the model's own samples from BOS (seeded, temperature 1, EOS ignored).
  auto fp_model = quant::load_model(*model_dir);
  at::Tensor calibration;
  {
    generation::GenerationRequest request;
    request.prompt_ids = {1};
    request.num_samples = 32;
    request.seed = 2024;
    request.params.temperature = 1.0;
    request.params.max_new_tokens = 127;
    generation::GenerationEngine engine(*fp_model, tokenizer, {32});
    const auto samples = engine.generate({request});
    calibration = at::empty({32, 128}, at::kLong);
    for (int64_t i = 0; i < 32; ++i) {
      calibration[i][0] = 1;
      REQUIRE(samples[i].token_ids.size() == 127);
      for (int64_t t = 0; t < 127; ++t) calibration[i][t + 1] = samples[i].token_ids[t];
    }
  }
  const double fp_nll = train::token_nll(*fp_model, windows).mean();

  std::map<std::tuple<std::string, int64_t, int>, double> nll;
  std::string table =
      fmt::format("held-out NLL (FP {:.4f}, {} tokens)\n{:<6} {:>6} {:>9} {:>9} {:>9}\n", fp_nll,
                  train::token_nll(*fp_model, windows).tokens, "method", "group", "W4", "W3", "W2");
  for (int64_t group : {int64_t{-1}, int64_t{32}}) {
    for (const char* method : {"rtn", "gptq", "awq"}) {
      std::string row = fmt::format("{:<6} {:>6}", method, group);
      for (int bits : {4, 3, 2}) {
        auto model = quant::load_model(*model_dir);
        quant::PtqOptions options;
        options.method = rqat::parse_enum<quant::PtqMethod>(method, "--method");
        options.spec.bits = bits;
        options.spec.group_size = group;
        options.verbose = false;
        std::ostringstream log;
        quant::quantize_model(*model, calibration, options, log);
        const double value = train::token_nll(*model, windows).mean();
        nll[{method, group, bits}] = value;
        row += fmt::format(" {:>9.4f}", value);
      }
      table += row + "\n";
    }
  }
  std::cout << table;
  for (int64_t group : {int64_t{-1}, int64_t{32}}) {
    for (const char* method : {"rtn", "gptq", "awq"}) {
      INFO(table << method << " group " << group);
      CHECK(fp_nll < nll[{method, group, 4}]);
      CHECK(nll[{method, group, 4}] < nll[{method, group, 3}]);
      CHECK(nll[{method, group, 3}] < nll[{method, group, 2}]);
    }
    INFO(table << "group " << group);
    CHECK(nll[{"gptq", group, 3}] < nll[{"rtn", group, 3}]);
    CHECK(nll[{"awq", group, 3}] < nll[{"rtn", group, 3}]);
  }
}

// config.json: any text either parses to a ModelConfig whose derived sizes are representable (the
// decoder multiplies them) or is refused with rqat::Error.
#include "fuzz_util.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const auto path = fuzz::scratch_file("config.json", fuzz::as_text(data, size));
  fuzz::expect_clean_failure([&] {
    const model::ModelConfig config = model::ModelConfig::load(path);
    fuzz::require(config.q_dim() > 0 && config.kv_dim() > 0, "positive attention widths");
    fuzz::require(model::weight_element_count(config) > 0, "a representable parameter count");
    (void)model::ModelConfig::from_json(config.to_json(), "round trip");
    (void)model::model_stop_token_ids(config);
  });
  return 0;
}

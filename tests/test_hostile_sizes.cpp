// Sizes read from files are checked before anything is multiplied or allocated (issue 18, class 1;
// docs/reliability.md): config.json widths, counts and token ids, a GPTQ quantization_config's
// bits, and the extent an HDF5 metrics file declares for a column. The hostile files are written
// here.
#include "catch.h"

#include <hdf5.h>

#include <string>

#include "io/checked_size.h"
#include "io/hdf5_columns.h"
#include "model/model_config.h"
#include "quant/gptq_config.h"
#include "test_util.h"

namespace {

using namespace rqat;
using rqat::test::require_error;
using rqat::test::TempDir;

// A valid small Qwen3 config with one field replaced by raw JSON text.
io::Json config_with(const std::string& key, const std::string& value) {
  io::Json json = io::Json::parse(R"({"model_type": "qwen3", "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "eos_token_id": 1})");
  json[key] = io::Json::parse(value);
  return json;
}

}  // namespace

TEST_CASE("checked sizes: products and sums that wrap are refused") {
  CHECK(io::checked_mul(int64_t{1} << 31, int64_t{1} << 31) == (int64_t{1} << 62));
  CHECK_FALSE(io::checked_mul(int64_t{1} << 32, int64_t{1} << 31));
  CHECK_FALSE(io::checked_mul(-1, 5));
  CHECK(io::checked_product({3, 5, 7}) == 105);
  CHECK_FALSE(io::checked_product({int64_t{1} << 40, int64_t{1} << 20, 8}));
  CHECK_FALSE(io::checked_add(INT64_MAX, 1));
}

TEST_CASE("config.json: sizes past rqat's limits name the field; the parameter count cannot wrap") {
  CHECK_NOTHROW(model::ModelConfig::from_json(config_with("vocab_size", "256"), "config.json"));
  require_error([] { model::ModelConfig::from_json(config_with("vocab_size", "4611686018427387904"),
                                                   "config.json"); },
                {"config.json", "'vocab_size'", "above rqat's limit"});
  // 2^64 - 1 is an unsigned JSON number that would read back as -1.
  require_error([] { model::ModelConfig::from_json(
                         config_with("hidden_size", "18446744073709551615"), "config.json"); },
                {"config.json", "'hidden_size'", "18446744073709551615", "above rqat's limit"});
  require_error([] { model::ModelConfig::from_json(config_with("hidden_size", "-64"), "config.json"); },
                {"'hidden_size'", "positive integer"});
  require_error([] { model::ModelConfig::from_json(config_with("num_hidden_layers", "100000"),
                                                   "config.json"); },
                {"'num_hidden_layers'", "above rqat's limit"});
  // Every field within its limit, but together 2^31 x 2^20 x 2 embedding weights alone.
  io::Json big = config_with("vocab_size", "2147483647");
  big["hidden_size"] = 1 << 20;
  big["head_dim"] = 1 << 18;
  require_error([&] { model::ModelConfig::from_json(big, "config.json"); },
                {"config.json", "more than 2^42 weights"});
  require_error([] { model::ModelConfig::from_json(config_with("eos_token_id", "[1, 1099511627776]"),
                                                   "config.json"); },
                {"'eos_token_id'", "not a token id"});
  require_error([] { model::ModelConfig::from_json(config_with("bos_token_id", "-3"), "config.json"); },
                {"'bos_token_id'", "not a token id"});
  io::Json rope = config_with("rope_scaling", R"({"rope_type": "llama3",
      "original_max_position_embeddings": 1e300})");
  rope["model_type"] = "llama";
  require_error([&] { model::ModelConfig::from_json(rope, "config.json"); },
                {"original_max_position_embeddings", "above rqat's limit"});

  const auto config = model::ModelConfig::from_json(config_with("vocab_size", "256"), "x");
  // 256 x 64 x 2 embeddings + 2 layers x (q,o 2x64x64 + k,v 64x64 + mlp 3x64x128 + norms) + norm.
  const int64_t per_layer = 2 * 64 * 64 + 64 * 64 + 3 * 64 * 128 + 2 * 64 + 2 * 16;
  CHECK(model::weight_element_count(config) == 256 * 64 * 2 + 2 * per_layer + 64);
}

TEST_CASE("GPTQ quantization_config: bits are read wide, not narrowed into range") {
  const io::Json config = io::Json::parse(
      R"({"quantization_config": {"quant_method": "gptq", "bits": 4294967300, "group_size": 128}})");
  require_error([&] { quant::read_gptq_config(config, "config.json"); },
                {"config.json: quantization_config.bits", "4294967300", "not supported"});
}

TEST_CASE("HDF5: a column declaring 2^40 values (unwritten chunks) is refused before allocation") {
  TempDir dir("hostile_hdf5");
  const auto path = dir / "metrics.h5";
  {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t extent = hsize_t{1} << 40, chunk = 1024;
    const hid_t space = H5Screate_simple(1, &extent, nullptr);
    const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(properties, 1, &chunk);
    const hid_t dataset = H5Dcreate2(file, "loss", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT,
                                     properties, H5P_DEFAULT);
    REQUIRE(dataset >= 0);
    H5Dclose(dataset);
    H5Pclose(properties);
    H5Sclose(space);
    H5Fclose(file);
  }
  require_error([&] { io::Hdf5Columns::read(path); },
                {"metrics.h5", "'loss'", "declares 1099511627776 values"});
  // The file stays readable for what rqat writes: an ordinary column reads back.
  io::Hdf5Columns columns;
  columns.add("step", std::vector<int64_t>{1, 2, 3});
  columns.write(dir / "ok.h5");
  CHECK(std::get<std::vector<int64_t>>(io::Hdf5Columns::read(dir / "ok.h5").columns().at("step")) ==
        std::vector<int64_t>{1, 2, 3});
}

// Model directories with one weight file or several shards and an index: round trips, stale-file
// clean-up, and errors when the index and the shards disagree.
#include <ATen/ATen.h>

#include "io/checkpoint.h"
#include "io/json_file.h"
#include "test_util.h"

using rqat::io::CheckpointReader;
using rqat::test::require_error;
using rqat::test::TempDir;

namespace {

rqat::io::NamedTensors some_tensors() {
  rqat::io::NamedTensors t;
  for (int i = 0; i < 6; ++i)
    t.emplace_back("layer." + std::to_string(i) + ".weight", at::full({10, 10}, float(i)));
  return t;
}

}  // namespace

TEST_CASE("checkpoint: single file and shards read back the same tensors") {
  TempDir dir("ckpt");
  const auto tensors = some_tensors();
  for (uint64_t shard_bytes : {uint64_t{0}, uint64_t{900}}) {
    INFO("max shard bytes " << shard_bytes);
    rqat::io::write_checkpoint(dir.path(), tensors, shard_bytes);
    CheckpointReader reader(dir.path());
    CHECK(reader.files().size() == (shard_bytes == 0 ? 1u : 3u));  // 400 bytes each, two per shard
    CHECK(reader.names().size() == tensors.size());
    for (const auto& [name, t] : tensors) CHECK(at::equal(reader.tensor(name), t));
    // Only the files of the latest save remain.
    int weight_files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      weight_files += e.path().extension() == ".safetensors";
    CHECK(weight_files == static_cast<int>(reader.files().size()));
    CHECK(std::filesystem::exists(dir / "model.safetensors.index.json") == (shard_bytes != 0));
  }
}

TEST_CASE("checkpoint: index and shards must agree") {
  TempDir dir("ckpt_bad");
  rqat::io::write_checkpoint(dir.path(), some_tensors(), 900);
  const auto index_path = dir / "model.safetensors.index.json";
  auto index = rqat::io::read_json_file(index_path);

  SECTION("a shard is missing") {
    std::filesystem::remove(dir / "model-00002-of-00003.safetensors");
    require_error([&] { CheckpointReader r(dir.path()); },
                  {"index.json", "model-00002-of-00003.safetensors"});
  }
  SECTION("a tensor is mapped to the wrong shard") {
    index["weight_map"]["layer.0.weight"] = "model-00002-of-00003.safetensors";
    rqat::io::write_json_file(index_path, index);
    require_error([&] { CheckpointReader r(dir.path()); },
                  {"'layer.0.weight'", "does not contain it"});
  }
  SECTION("a shard holds a tensor the index does not list") {
    index["weight_map"].erase("layer.5.weight");
    rqat::io::write_json_file(index_path, index);
    require_error([&] { CheckpointReader r(dir.path()); },
                  {"'layer.5.weight'", "index does not map"});
  }
  SECTION("weight_map is missing") {
    rqat::io::write_json_file(index_path, rqat::io::Json{{"metadata", {}}});
    require_error([&] { CheckpointReader r(dir.path()); }, {"index.json", "weight_map"});
  }
  SECTION("the index is not JSON") {
    rqat::test::write_bytes(index_path, "{oops");
    require_error([&] { CheckpointReader r(dir.path()); }, {"index.json", "invalid JSON"});
  }
}

TEST_CASE("checkpoint: a directory without weights is a clear error") {
  TempDir dir("ckpt_empty");
  require_error([&] { CheckpointReader r(dir.path()); },
                {dir.path().string(), "model.safetensors"});
}

// See checkpoint.h.
#include "io/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "io/error.h"
#include "io/json_file.h"

namespace rqat::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool is_weight_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name == kSingleFile || name == kIndexFile ||
         (name.starts_with("model-") && name.ends_with(".safetensors"));
}

}  // namespace

CheckpointReader::CheckpointReader(const fs::path& dir) {
  const fs::path index_path = dir / kIndexFile;
  const fs::path single_path = dir / kSingleFile;
  if (fs::exists(index_path)) {
    const Json index = read_json_file(index_path);
    const std::string where = index_path.string();
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail("{}: field 'weight_map' is missing or not an object", where);
    }
    std::map<std::string, size_t> file_index;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) fail("{}: weight_map['{}'] is not a file name", where, name);
      const std::string shard = file.get<std::string>();
      if (shard.find('/') != std::string::npos)
        fail("{}: weight_map['{}'] = '{}' leaves the directory", where, name, shard);
      auto [it, inserted] = file_index.emplace(shard, files_.size());
      if (inserted) {
        if (!fs::exists(dir / shard))
          fail("{}: shard '{}' (holding '{}') does not exist", where, shard, name);
        files_.push_back(SafetensorsFile::open(dir / shard));
      }
      if (!files_[it->second]->contains(name)) {
        fail("{}: tensor '{}' is mapped to '{}', which does not contain it", where, name, shard);
      }
      location_[name] = it->second;
    }
    for (const auto& file : files_) {
      for (const auto& entry : file->entries()) {
        if (location_.count(entry.name) == 0 || files_[location_[entry.name]] != file) {
          fail("{}: tensor '{}' is in '{}' but the index does not map it there", where, entry.name,
               file->path().filename().string());
        }
      }
    }
  } else if (fs::exists(single_path)) {
    files_.push_back(SafetensorsFile::open(single_path));
    for (const auto& entry : files_[0]->entries()) location_[entry.name] = 0;
  } else {
    fail("{}: no {} or {} (only safetensors checkpoints are supported)", dir.string(), kSingleFile,
         kIndexFile);
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : location_) out.push_back(name);
  return out;
}

at::Tensor CheckpointReader::tensor(const std::string& name) const {
  auto it = location_.find(name);
  if (it == location_.end()) fail("checkpoint has no tensor '{}'", name);
  return files_[it->second]->tensor(name);
}

uint64_t CheckpointReader::total_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files_) total += f->file_size();
  return total;
}

void write_checkpoint(const fs::path& dir, const NamedTensors& tensors, uint64_t max_shard_bytes) {
  fs::create_directories(dir);
  // Greedy packing in the given order, so shards follow the model's layer order like transformers'.
  std::vector<NamedTensors> shards(1);
  uint64_t shard_bytes = 0;
  for (const auto& item : tensors) {
    const uint64_t bytes = item.second.numel() * item.second.element_size();
    if (max_shard_bytes > 0 && shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(item);
    shard_bytes += bytes;
  }
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors(dir / kSingleFile, shards[0]);
    written.insert(kSingleFile);
  } else {
    Json weight_map = Json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      save_safetensors(dir / name, shards[i]);
      written.insert(name);
      for (const auto& [tensor_name, t] : shards[i]) weight_map[tensor_name] = name;
    }
    Json index = {{"metadata", {{"total_size", safetensors_byte_size(tensors)}}},
                  {"weight_map", weight_map}};
    write_json_file(dir / kIndexFile, index);
    written.insert(kIndexFile);
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (is_weight_file(entry.path()) && written.count(entry.path().filename().string()) == 0) {
      fs::remove(entry.path());
    }
  }
}

}  // namespace rqat::io

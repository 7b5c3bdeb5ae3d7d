// The weights of a Hugging Face model directory: model.safetensors, or shards
// model-0000i-of-0000n.safetensors listed by model.safetensors.index.json.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace rqat::io {

class CheckpointReader {
 public:
  // Opens (maps) every file and validates that the index and the shards agree.
  explicit CheckpointReader(const std::filesystem::path& dir);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return location_.count(name) != 0; }
  at::Tensor tensor(const std::string& name) const;  // aliases the mapping where possible
  uint64_t total_bytes() const;                      // sizes of all files
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> location_;  // tensor name -> index into files_
};

// Writes the tensors as one model.safetensors, or as shards of at most max_shard_bytes (0: no
// limit) with an index; each file is written atomically, and weight files of an earlier save that
// the new set does not use are removed afterwards.
void write_checkpoint(const std::filesystem::path& dir, const NamedTensors& tensors,
                      uint64_t max_shard_bytes);

}  // namespace rqat::io

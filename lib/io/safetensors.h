// Reader and writer for the safetensors format: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw tensor bytes.
// The reader maps the file and hands out tensors that alias the mapping (no copy) when aligned.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/mapped_file.h"

namespace rqat::io {

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Maps and validates the whole header; throws rqat::Error naming the file and tensor on any
  // defect.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  uint64_t file_size() const { return file_.size(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const SafetensorsEntry* find(std::string_view name) const;

  // The tensor, aliasing the mapped bytes (copy-on-write) when its address suits its dtype;
  // otherwise a copy. The mapping stays alive as long as any returned tensor does.
  at::Tensor tensor(std::string_view name) const;

  explicit SafetensorsFile(const std::filesystem::path& path);  // use open()

 private:
  void parse_header();

  MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes tensors (any device, any layout; stored contiguous, in the given order) atomically.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

std::string_view safetensors_dtype_name(
    at::ScalarType dtype);                                    // "BF16", ...; throws if unsupported
uint64_t safetensors_byte_size(const NamedTensors& tensors);  // data bytes, without header

}  // namespace rqat::io

// Read-only view of a whole file through mmap (MAP_PRIVATE: pages are shared with the page cache
// and copied only if someone writes to them, so weights load without a copy).
#pragma once

#include <cstddef>
#include <filesystem>

namespace rqat::io {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::byte* mutable_data() const { return data_; }  // copy-on-write pages
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace rqat::io

// See atomic_file.h. The temporary name carries the pid so concurrent writers do not collide.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "io/error.h"

namespace rqat::io {

namespace {

void fsync_path(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write) {
  auto tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot create: {}", tmp.string(), std::strerror(errno));
    write(out);
    out.flush();
    if (!out) fail("{}: write failed: {}", tmp.string(), std::strerror(errno));
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  fsync_path(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail("{}: cannot rename temporary file into place: {}", path.string(), ec.message());
  }
  fsync_path(path.parent_path().empty() ? "." : path.parent_path());
}

void write_text_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, [&](std::ostream& out) { out.write(text.data(), text.size()); });
}

}  // namespace rqat::io

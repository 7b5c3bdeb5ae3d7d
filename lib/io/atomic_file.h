// Atomic file output: write next to the target under a temporary name, fsync, then rename, so a
// reader (or a resumed run) never sees a half-written checkpoint, manifest or config.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string_view>

namespace rqat::io {

// Calls `write` with a stream on a temporary file and renames it to `path` if everything succeeded.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

void write_text_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace rqat::io

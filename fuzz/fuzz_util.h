// What every fuzz target shares: the input as parts, files in a private scratch directory (the
// readers under test take paths, as the tools do), and the rule that a hostile input may end only
// in rqat::Error with a one-line message. Any other exception escapes to libFuzzer, which reports
// it as a crash: it would reach the user as a message that names no file, or as a terminate.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "io/error.h"

namespace rqat::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The text before the first NUL byte and the bytes after it (empty when there is none). Seeds are
// written as "first part\0second part", so a mutation can grow either side.
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view input) {
  const size_t at = input.find('\0');
  if (at == std::string_view::npos) return {input, {}};
  return {input.substr(0, at), input.substr(at + 1)};
}

// A directory under /dev/shm (memory, not disk) owned by this process, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto path = base / ("rqat-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return path;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::filesystem::path scratch_file(const std::string& name, std::string_view bytes) {
  const auto path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// Runs `read`; an rqat::Error with a message is the expected answer to bad input (the tools print
// it as one line, escaping any line break a quoted field brings along: cli::run_tool).
template <class Read>
void expect_clean_failure(Read&& read) {
  try {
    read();
  } catch (const rqat::Error& e) {
    if (std::string_view(e.what()).empty()) {
      std::fprintf(stderr, "fuzz: an error without a message\n");
      std::abort();
    }
  }
}

// Stops the run when an invariant the reader promises does not hold.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace rqat::fuzz

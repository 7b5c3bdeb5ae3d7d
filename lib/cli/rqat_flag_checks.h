// Checks of rqat's flag values that CLI11 validators made before the subcommands' flags were
// declared (io/options.h): a missing input, a count below 1, a fraction outside 0..1. Each fails
// with one line that names the flag and its value, before the subcommand does any work.
#pragma once

#include <filesystem>
#include <string_view>

#include "io/error.h"

namespace rqat::cli {

// An existing file (not a directory): "--config X: file not found".
void require_existing_file(std::string_view flag, const std::filesystem::path& path);
// An existing directory: "--model X: directory not found".
void require_existing_directory(std::string_view flag, const std::filesystem::path& path);
// An existing file or directory: "--model X: not found".
void require_existing_path(std::string_view flag, const std::filesystem::path& path);

// `value` of `flag` is at least `least`: "--jobs 0: must be at least 1".
template <class T>
void require_at_least(std::string_view flag, T value, T least) {
  if (value < least) fail("{} {}: must be at least {}", flag, value, least);
}

// `value` of `flag` is within [low, high]: "--top-p 1.5: must be within 0 and 1".
template <class T>
void require_within(std::string_view flag, T value, T low, T high) {
  if (value < low || value > high) fail("{} {}: must be within {} and {}", flag, value, low, high);
}

}  // namespace rqat::cli

// See rqat_flag_checks.h.
#include "cli/rqat_flag_checks.h"

namespace rqat::cli {

namespace fs = std::filesystem;

void require_existing_file(std::string_view flag, const fs::path& path) {
  if (!fs::exists(path)) fail("{} {}: file not found", flag, path.string());
  if (fs::is_directory(path)) fail("{} {}: is a directory, not a file", flag, path.string());
}

void require_existing_directory(std::string_view flag, const fs::path& path) {
  if (!fs::exists(path)) fail("{} {}: directory not found", flag, path.string());
  if (!fs::is_directory(path)) fail("{} {}: not a directory", flag, path.string());
}

void require_existing_path(std::string_view flag, const fs::path& path) {
  if (!fs::exists(path)) fail("{} {}: not found", flag, path.string());
}

}  // namespace rqat::cli

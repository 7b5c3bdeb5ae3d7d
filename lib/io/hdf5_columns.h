// Tables of named 1-D columns in HDF5, the format of every per-sample and per-step metric file of
// rqat (plotted by scripts/plot.py, read by `rqat report`). A column is one dataset: float64,
// int64 or variable-length UTF-8 strings; a name with '/' places it in a group. Root attributes
// carry small strings (tool, benchmark, ...). Files are written atomically (temp + rename).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace rqat::io {

using Hdf5Column =
    std::variant<std::vector<double>, std::vector<int64_t>, std::vector<std::string>>;

class Hdf5Columns {
 public:
  // Replaces a column of the same name. Columns need not have equal lengths.
  void add(const std::string& name, Hdf5Column values);
  void set_attribute(const std::string& name, const std::string& value);

  const std::map<std::string, Hdf5Column>& columns() const { return columns_; }
  const std::map<std::string, std::string>& attributes() const { return attributes_; }

  // Writes every column and attribute to `path` atomically; rqat::Error names the path on failure.
  void write(const std::filesystem::path& path) const;

  // Reads every dataset (recursively through groups) and the root's string attributes.
  static Hdf5Columns read(const std::filesystem::path& path);

 private:
  std::map<std::string, Hdf5Column> columns_;
  std::map<std::string, std::string> attributes_;
};

}  // namespace rqat::io

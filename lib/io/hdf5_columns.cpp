#include "io/hdf5_columns.h"

#include <hdf5.h>
#include <unistd.h>

#include <exception>
#include <system_error>

#include "io/error.h"

namespace rqat::io {

namespace {

// HDF5 prints its own error stack to stderr by default; rqat reports one line instead.
void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// Closes an HDF5 handle with the matching close function when it leaves scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t status, const std::string& path, const std::string& what) {
  if (status < 0) fail("{}: HDF5 failed to {}", path, what);
}

Handle utf8_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

void write_column(hid_t file, const std::string& path, const std::string& name,
                  const Hdf5Column& column) {
  Handle link_props(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(link_props.get(), 1);
  const hsize_t size =
      std::visit([](const auto& v) { return static_cast<hsize_t>(v.size()); }, column);
  Handle space(H5Screate_simple(1, &size, nullptr), H5Sclose);
  auto create = [&](hid_t type) {
    Handle dataset(H5Dcreate2(file, name.c_str(), type, space.get(), link_props.get(), H5P_DEFAULT,
                              H5P_DEFAULT),
                   H5Dclose);
    if (!dataset.valid()) fail("{}: HDF5 cannot create dataset '{}'", path, name);
    return dataset;
  };
  if (const auto* doubles = std::get_if<std::vector<double>>(&column)) {
    auto dataset = create(H5T_IEEE_F64LE);
    if (!doubles->empty())
      check(H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                     doubles->data()),
            path, "write dataset '" + name + "'");
  } else if (const auto* ints = std::get_if<std::vector<int64_t>>(&column)) {
    auto dataset = create(H5T_STD_I64LE);
    if (!ints->empty())
      check(H5Dwrite(dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ints->data()),
            path, "write dataset '" + name + "'");
  } else {
    const auto& strings = std::get<std::vector<std::string>>(column);
    auto type = utf8_string_type();
    auto dataset = create(type.get());
    std::vector<const char*> pointers;
    pointers.reserve(strings.size());
    for (const auto& s : strings) pointers.push_back(s.c_str());
    if (!pointers.empty())
      check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()),
            path, "write dataset '" + name + "'");
  }
}

void write_attribute(hid_t file, const std::string& path, const std::string& name,
                     const std::string& value) {
  auto type = utf8_string_type();
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(
      H5Acreate2(file, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) fail("{}: HDF5 cannot create attribute '{}'", path, name);
  const char* text = value.c_str();
  check(H5Awrite(attribute.get(), type.get(), &text), path, "write attribute '" + name + "'");
}

// The most values one column may hold. rqat's metric files have one value per step or sample; a
// dataset can declare any extent in a few bytes (unwritten chunks read as the fill value), so the
// extent is checked before a buffer of that size is allocated.
constexpr hsize_t kMaxColumnValues = hsize_t{1} << 28;

// What the visit callbacks share. HDF5 is C: an exception must not unwind through its frames
// (its locks and handles would be left behind), so a callback stores the error and stops the
// iteration, and read() rethrows it.
struct ReadContext {
  std::string path;
  Hdf5Columns* out;
  std::exception_ptr error;
};

// Runs one callback body; on an exception, keeps it and tells HDF5 to stop iterating.
template <class Body>
herr_t guarded(ReadContext* context, Body&& body) {
  try {
    body();
    return 0;
  } catch (...) {
    context->error = std::current_exception();
    return -1;
  }
}

// A numeric dataset converted by HDF5 to `memory_type` (float64 or int64) on reading.
template <class T>
std::vector<T> read_numbers(hid_t dataset, hid_t memory_type, hsize_t size, const std::string& path,
                            const std::string& name) {
  std::vector<T> values(size);
  if (size > 0)
    check(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), path,
          "read dataset '" + name + "'");
  return values;
}

Hdf5Column read_dataset(hid_t dataset, const std::string& path, const std::string& name) {
  Handle space(H5Dget_space(dataset), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != 1)
    fail("{}: dataset '{}' is not one-dimensional", path, name);
  hsize_t size = 0;
  if (H5Sget_simple_extent_dims(space.get(), &size, nullptr) < 0)
    fail("{}: HDF5 cannot read the extent of dataset '{}'", path, name);
  if (size > kMaxColumnValues)
    fail("{}: dataset '{}' declares {} values, above rqat's limit of 2^28 per column", path, name,
         size);
  Handle type(H5Dget_type(dataset), H5Tclose);
  switch (H5Tget_class(type.get())) {
    case H5T_FLOAT:
      return read_numbers<double>(dataset, H5T_NATIVE_DOUBLE, size, path, name);
    case H5T_INTEGER:
      return read_numbers<int64_t>(dataset, H5T_NATIVE_INT64, size, path, name);
    case H5T_STRING: {
      if (!H5Tis_variable_str(type.get()))
        fail("{}: dataset '{}' holds fixed-length strings (rqat writes variable-length)", path,
             name);
      auto memory_type = utf8_string_type();
      std::vector<char*> pointers(size, nullptr);
      if (size > 0)
        check(H5Dread(dataset, memory_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()),
              path, "read dataset '" + name + "'");
      std::vector<std::string> values;
      values.reserve(size);
      for (char* p : pointers) values.emplace_back(p ? p : "");
      if (size > 0) H5Dvlen_reclaim(memory_type.get(), space.get(), H5P_DEFAULT, pointers.data());
      return values;
    }
    default:
      fail("{}: dataset '{}' has a type rqat does not read (float, integer or string)", path, name);
  }
}

herr_t visit_object(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto* context = static_cast<ReadContext*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  return guarded(context, [&] {
    Handle dataset(H5Dopen2(root, name, H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) fail("{}: HDF5 cannot open dataset '{}'", context->path, name);
    context->out->add(name, read_dataset(dataset.get(), context->path, name));
  });
}

herr_t visit_attribute(hid_t location, const char* name, const H5A_info_t*, void* data) {
  auto* context = static_cast<ReadContext*>(data);
  return guarded(context, [&] {
    Handle attribute(H5Aopen(location, name, H5P_DEFAULT), H5Aclose);
    Handle type(H5Aget_type(attribute.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING || !H5Tis_variable_str(type.get()))
      return;  // only the string attributes rqat writes
    auto memory_type = utf8_string_type();
    char* text = nullptr;
    check(H5Aread(attribute.get(), memory_type.get(), &text), context->path,
          std::string("read attribute '") + name + "'");
    context->out->set_attribute(name, text ? text : "");
    H5free_memory(text);
  });
}

}  // namespace

void Hdf5Columns::add(const std::string& name, Hdf5Column values) {
  if (name.empty() || name.front() == '/' || name.back() == '/')
    fail("HDF5 column name '{}' must be non-empty and not start or end with '/'", name);
  columns_[name] = std::move(values);
}

void Hdf5Columns::set_attribute(const std::string& name, const std::string& value) {
  attributes_[name] = value;
}

void Hdf5Columns::write(const std::filesystem::path& path) const {
  silence_hdf5_errors();
  const std::string target = path.string();
  if (path.has_parent_path()) {
    std::error_code error;
    std::filesystem::create_directories(path.parent_path(), error);
    if (error) fail("{}: cannot create its directory: {}", target, error.message());
  }
  const std::filesystem::path temp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    Handle file(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) fail("{}: cannot create HDF5 file", target);
    try {
      for (const auto& [name, column] : columns_) write_column(file.get(), target, name, column);
      for (const auto& [name, value] : attributes_)
        write_attribute(file.get(), target, name, value);
      check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), target, "flush");
    } catch (...) {
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      throw;
    }
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error)
    fail("{}: cannot rename the finished HDF5 file into place: {}", target, error.message());
}

Hdf5Columns Hdf5Columns::read(const std::filesystem::path& path) {
  silence_hdf5_errors();
  const std::string source = path.string();
  if (!std::filesystem::exists(path)) fail("{}: no such HDF5 file", source);
  Handle file(H5Fopen(source.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) fail("{}: not a readable HDF5 file", source);
  Hdf5Columns result;
  ReadContext context{source, &result, nullptr};
  const herr_t datasets = H5Ovisit(file.get(), H5_INDEX_NAME, H5_ITER_INC, visit_object, &context);
  if (context.error) std::rethrow_exception(context.error);
  check(datasets, source, "list datasets");
  hsize_t index = 0;
  const herr_t attributes =
      H5Aiterate2(file.get(), H5_INDEX_NAME, H5_ITER_INC, &index, visit_attribute, &context);
  if (context.error) std::rethrow_exception(context.error);
  check(attributes, source, "list attributes");
  return result;
}

}  // namespace rqat::io

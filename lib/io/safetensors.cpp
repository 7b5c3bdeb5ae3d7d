// See safetensors.h. Validation follows the format's rules: every tensor's bytes lie inside the
// data section, dtype x shape matches the byte count, and tensors tile the section with no overlap
// and no hole (as the reference implementation requires).
#include "io/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/error.h"
#include "io/json_file.h"
#include "io/json_text.h"

namespace rqat::io {

namespace {

// Upper bound on the JSON header, as in the reference implementation: a larger value means a
// corrupt length field, not a real header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  std::string_view name;
  at::ScalarType type;
};

constexpr DTypeName kDTypes[] = {
    {"BF16", at::kBFloat16},
    {"F16", at::kHalf},
    {"F32", at::kFloat},
    {"F64", at::kDouble},
    {"I64", at::kLong},
    {"I32", at::kInt},
    {"I16", at::kShort},
    {"I8", at::kChar},
    {"U8", at::kByte},
    {"BOOL", at::kBool},
    {"F8_E4M3", at::kFloat8_e4m3fn},
};

bool parse_dtype(std::string_view name, at::ScalarType* out) {
  for (const auto& d : kDTypes) {
    if (d.name == name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string_view safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDTypes) {
    if (d.type == dtype) return d.name;
  }
  fail("safetensors: dtype {} cannot be stored", c10::toString(dtype));
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto file = std::make_shared<SafetensorsFile>(path);
  file->parse_header();
  return file;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {}

void SafetensorsFile::parse_header() {
  const std::string file = file_.path().string();
  if (file_.size() < 8)
    fail("{}: truncated safetensors file ({} bytes, no header length)", file, file_.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);  // little-endian on every platform we build for
  if (header_len > kMaxHeaderBytes)
    fail("{}: corrupt safetensors header length {}", file, header_len);
  if (header_len > file_.size() - 8) {
    fail("{}: truncated safetensors file: header needs {} bytes, file has {}", file, header_len,
         file_.size() - 8);
  }
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_.size() - data_start_;
  const char* text = reinterpret_cast<const char*>(file_.data() + 8);

  nlohmann::json header;
  if (auto problem = parse_json_into(std::string_view(text, header_len), header))
    fail("{} header: {}", file, *problem);
  if (!header.is_object()) fail("{}: safetensors header is not a JSON object", file);

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail("{}: __metadata__ is not an object", file);
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) fail("{}: __metadata__.{} is not a string", file, key);
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) fail("{}: tensor '{}': entry is not an object", file, name);
    SafetensorsEntry entry;
    entry.name = name;
    const auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string())
      fail("{}: tensor '{}': missing dtype", file, name);
    if (!parse_dtype(dtype->get<std::string>(), &entry.dtype)) {
      fail("{}: tensor '{}': unknown dtype '{}'", file, name, dtype->get<std::string>());
    }
    const auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array())
      fail("{}: tensor '{}': missing shape", file, name);
    // The byte count is bounded by the element count times the element size, each product
    // checked before it is taken: a shape whose bytes wrap around 2^64 would otherwise match a
    // small data range and let the tensor view read far outside the mapping.
    const uint64_t element_size = c10::elementSize(entry.dtype);
    constexpr uint64_t kMaxBytes = static_cast<uint64_t>(INT64_MAX);
    uint64_t numel = 1;
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned())
        fail("{}: tensor '{}': shape has a non-integer or negative dimension", file, name);
      const uint64_t d = dim.get<uint64_t>();
      if (d != 0 && numel > kMaxBytes / element_size / d)
        fail("{}: tensor '{}': shape {} overflows a 64-bit byte count", file, name, shape->dump());
      numel *= d;
      entry.shape.push_back(static_cast<int64_t>(d));
    }
    const auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      fail("{}: tensor '{}': data_offsets must be [begin, end]", file, name);
    }
    entry.begin = (*offsets)[0].get<uint64_t>();
    entry.end = (*offsets)[1].get<uint64_t>();
    if (entry.begin > entry.end) fail("{}: tensor '{}': data_offsets begin > end", file, name);
    if (entry.end > data_size) {
      fail(
          "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes; file "
          "truncated?)",
          file, name, entry.begin, entry.end, data_size);
    }
    const uint64_t expected = numel * element_size;
    if (entry.end - entry.begin != expected) {
      fail("{}: tensor '{}': {} bytes stored but dtype x shape needs {}", file, name,
           entry.end - entry.begin, expected);
    }
    entries_.push_back(std::move(entry));
  }

  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t covered = 0;
  for (const auto& e : entries_) {
    if (e.begin < covered) fail("{}: tensor '{}' overlaps the tensor before it", file, e.name);
    if (e.begin > covered)
      fail("{}: bytes [{}, {}) before tensor '{}' belong to no tensor", file, covered, e.begin,
           e.name);
    covered = e.end;
  }
  if (covered != data_size) {
    fail("{}: {} trailing bytes after the last tensor belong to no tensor", file,
         data_size - covered);
  }
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

at::Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* entry = find(name);
  if (entry == nullptr) fail("{}: no tensor named '{}'", path().string(), name);
  std::byte* ptr = file_.mutable_data() + data_start_ + entry->begin;
  const auto options = at::TensorOptions().dtype(entry->dtype);
  const auto align = c10::elementSize(entry->dtype);
  if (entry->end == entry->begin) return at::empty(entry->shape, options);
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0) {
    // Misaligned (a header length that is not a multiple of 8): typed access would be UB, so copy.
    at::Tensor copy = at::empty(entry->shape, options);
    std::memcpy(copy.data_ptr(), ptr, entry->end - entry->begin);
    return copy;
  }
  auto keep_alive = shared_from_this();
  return at::from_blob(
      ptr, entry->shape, [keep_alive](void*) mutable { keep_alive.reset(); }, options);
}

uint64_t safetensors_byte_size(const NamedTensors& tensors) {
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.numel() * t.element_size();
  return total;
}

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (header.contains(name)) fail("{}: tensor '{}' given twice", path.string(), name);
    auto c = t.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = c.numel() * c.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(c.scalar_type())},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(std::move(c));
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned and every tensor maps without a copy.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  write_file_atomically(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(&header_len), 8);
    out.write(text.data(), text.size());
    for (const auto& c : contiguous) {
      out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
    }
  });
}

}  // namespace rqat::io

// See gguf_file.h. Layout written (GGUF v3, little-endian):
//   "GGUF" u32 version=3 | u64 tensor count | u64 metadata count
//   metadata: string key, u32 value type, value   (string = u64 byte length + bytes;
//             array = u32 element type, u64 count, elements)
//   tensor infos: string name, u32 dims, u64 ne[0..dims) (innermost first), u32 ggml type,
//                 u64 offset from the start of the data section (a multiple of the alignment)
//   zero padding to the alignment, then every tensor's bytes, each padded to the alignment.
#include "io/gguf_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <ostream>

#include "io/atomic_file.h"
#include "io/checked_size.h"
#include "io/error.h"

namespace rqat::io {

namespace {

static_assert(std::endian::native == std::endian::little, "GGUF files are little-endian");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;

// GGUF's value type ids.
enum ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

constexpr std::array<GgufTypeInfo, static_cast<size_t>(GgufType::kCount)> kTypes = {{
    {0, 1, 4},       // f32
    {1, 1, 2},       // f16
    {30, 1, 2},      // bf16
    {8, 32, 34},     // q8_0: fp16 d, 32 int8
    {2, 32, 18},     // q4_0: fp16 d, 16 bytes of nibbles
    {3, 32, 20},     // q4_1: fp16 d, fp16 m, 16 bytes of nibbles
    {10, 256, 84},   // q2_k: 16 scale/min bytes, 64 bytes of 2-bit codes, fp16 d, dmin
    {11, 256, 110},  // q3_k: 32 bytes high bits, 64 bytes of 2-bit codes, 12 scale bytes, fp16 d
    {12, 256, 144},  // q4_k: fp16 d, dmin, 12 scale/min bytes, 128 bytes of nibbles
    {13, 256, 176},  // q5_k: q4_k + 32 bytes of high bits
    {14, 256, 210},  // q6_k: 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, fp16 d
}};

template <class T>
void put(std::ostream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_string(std::ostream& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

void put_value(std::ostream& out, const GgufValue& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint32_t>) {
          put<uint32_t>(out, kUint32), put(out, v);
        } else if constexpr (std::is_same_v<T, int32_t>) {
          put<uint32_t>(out, kInt32), put(out, v);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          put<uint32_t>(out, kUint64), put(out, v);
        } else if constexpr (std::is_same_v<T, float>) {
          put<uint32_t>(out, kFloat32), put(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          put<uint32_t>(out, kBool), put<uint8_t>(out, v ? 1 : 0);
        } else if constexpr (std::is_same_v<T, std::string>) {
          put<uint32_t>(out, kString), put_string(out, v);
        } else {
          using E = typename T::value_type;
          put<uint32_t>(out, kArray);
          put<uint32_t>(out, std::is_same_v<E, std::string> ? kString
                             : std::is_same_v<E, int32_t>   ? kInt32
                                                            : kFloat32);
          put<uint64_t>(out, v.size());
          for (const auto& e : v) {
            if constexpr (std::is_same_v<E, std::string>) {
              put_string(out, e);
            } else {
              put(out, e);
            }
          }
        }
      },
      value);
}

int64_t product_or_fail(std::initializer_list<int64_t> factors, const std::string& what) {
  const auto product = checked_product(factors);
  if (!product) fail("{}: its size does not fit in 64 bits", what);
  return *product;
}

uint64_t aligned(uint64_t offset, uint64_t alignment) {
  return (offset + alignment - 1) / alignment * alignment;
}

void pad(std::ostream& out, uint64_t written, uint64_t alignment) {
  static const char zeros[256] = {};
  for (uint64_t n = aligned(written, alignment) - written; n > 0;) {
    const uint64_t chunk = std::min<uint64_t>(n, sizeof(zeros));
    out.write(zeros, static_cast<std::streamsize>(chunk));
    n -= chunk;
  }
}

// A bounded reader of the whole file in memory (GGUF files rqat reads are its own, in tests).
class Reader {
 public:
  Reader(std::string bytes, std::string where)
      : bytes_(std::move(bytes)), where_(std::move(where)) {}

  template <class T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    need(n);
    std::string s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  GgufValue get_value(uint32_t type, const std::string& key) {
    switch (type) {
      case kUint32:
        return get<uint32_t>();
      case kInt32:
        return get<int32_t>();
      case kUint64:
        return get<uint64_t>();
      case kFloat32:
        return get<float>();
      case kBool:
        return get<uint8_t>() != 0;
      case kString:
        return get_string();
      case kArray: {
        const uint32_t element = get<uint32_t>();
        const uint64_t count = get<uint64_t>();
        if (count > bytes_.size()) fail("{}: metadata {} has {} elements", where_, key, count);
        if (element == kString) {
          std::vector<std::string> v;
          for (uint64_t i = 0; i < count; ++i) v.push_back(get_string());
          return v;
        }
        if (element == kInt32) {
          std::vector<int32_t> v;
          for (uint64_t i = 0; i < count; ++i) v.push_back(get<int32_t>());
          return v;
        }
        if (element == kFloat32) {
          std::vector<float> v;
          for (uint64_t i = 0; i < count; ++i) v.push_back(get<float>());
          return v;
        }
        fail("{}: metadata {} is an array of value type {}, which rqat does not read", where_, key,
             element);
      }
      default:
        fail("{}: metadata {} has value type {}, which rqat does not read", where_, key, type);
    }
  }
  size_t offset() const { return at_; }
  const std::string& bytes() const { return bytes_; }
  const std::string& where() const { return where_; }

 private:
  void need(uint64_t n) const {
    if (n > bytes_.size() - at_) fail("{}: truncated at byte {}", where_, at_);
  }
  std::string bytes_;
  std::string where_;
  size_t at_ = 0;
};

}  // namespace

GgufTypeInfo gguf_type_info(GgufType type) { return kTypes.at(static_cast<size_t>(type)); }

std::optional<GgufType> gguf_type_of_id(uint32_t ggml_id) {
  for (size_t i = 0; i < kTypes.size(); ++i)
    if (kTypes[i].ggml_id == ggml_id) return static_cast<GgufType>(i);
  return std::nullopt;
}

int64_t gguf_tensor_bytes(GgufType type, int64_t row_elements, int64_t rows,
                          const std::string& what) {
  const GgufTypeInfo info = gguf_type_info(type);
  if (row_elements <= 0 || row_elements % info.block_elements != 0)
    fail("{}: rows of {} values are not a whole number of {} blocks of {}", what, row_elements,
         enum_name(type), info.block_elements);
  return product_or_fail({row_elements / info.block_elements, info.block_bytes, rows}, what);
}

void GgufWriter::add(std::string key, GgufValue value) {
  for (const auto& [k, v] : metadata_)
    if (k == key) fail("GGUF metadata key {} added twice", key);
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(GgufTensor tensor) {
  if (tensor.shape.empty()) fail("GGUF tensor {} has no dimensions", tensor.name);
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < tensor.shape.size(); ++i) rows *= tensor.shape[i];
  const int64_t bytes = gguf_tensor_bytes(tensor.type, tensor.shape.back(), rows, tensor.name);
  if (static_cast<int64_t>(tensor.data.size()) != bytes)
    fail("GGUF tensor {}: {} bytes for a {} tensor of shape {} that takes {}", tensor.name,
         tensor.data.size(), enum_name(tensor.type), fmt::join(tensor.shape, "x"), bytes);
  for (const auto& t : tensors_)
    if (t.name == tensor.name) fail("GGUF tensor {} added twice", tensor.name);
  tensors_.push_back(std::move(tensor));
}

void GgufWriter::write(const std::filesystem::path& path) const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, value] : metadata_) {
    if (key != "general.alignment") continue;
    const auto* a = std::get_if<uint32_t>(&value);
    if (!a || *a == 0 || (*a & (*a - 1)) != 0)
      fail("GGUF general.alignment must be a uint32 power of two");
    alignment = *a;
  }
  write_file_atomically(path, [&](std::ostream& out) {
    uint64_t written = 0;
    const auto count = [&out, &written] { written = static_cast<uint64_t>(out.tellp()); };
    put(out, kMagic);
    put(out, kVersion);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, metadata_.size());
    for (const auto& [key, value] : metadata_) {
      put_string(out, key);
      put_value(out, value);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
      for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(out, *d);
      put<uint32_t>(out, gguf_type_info(t.type).ggml_id);
      put<uint64_t>(out, offset);
      offset = aligned(offset + t.data.size(), alignment);
    }
    count();
    pad(out, written, alignment);
    for (const auto& t : tensors_) {
      out.write(t.data.data(), static_cast<std::streamsize>(t.data.size()));
      pad(out, t.data.size(), alignment);
    }
    if (!out) fail("{}: writing the GGUF file failed", path.string());
  });
}

const GgufValue* GgufContents::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

GgufContents read_gguf(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Reader r(std::move(bytes), path.string());
  if (r.get<uint32_t>() != kMagic) fail("{}: not a GGUF file (no GGUF magic)", path.string());
  GgufContents c;
  c.version = r.get<uint32_t>();
  if (c.version != kVersion) fail("{}: GGUF version {} (rqat reads 3)", path.string(), c.version);
  const uint64_t tensors = r.get<uint64_t>(), keys = r.get<uint64_t>();
  if (tensors > r.bytes().size() || keys > r.bytes().size())
    fail("{}: {} tensors and {} metadata keys cannot fit the file", path.string(), tensors, keys);
  uint64_t alignment = kDefaultAlignment;
  for (uint64_t i = 0; i < keys; ++i) {
    std::string key = r.get_string();
    GgufValue value = r.get_value(r.get<uint32_t>(), key);
    if (key == "general.alignment")
      if (const auto* a = std::get_if<uint32_t>(&value); a && *a > 0 && (*a & (*a - 1)) == 0)
        alignment = *a;
    c.metadata.emplace_back(std::move(key), std::move(value));
  }
  std::vector<uint64_t> offsets;
  for (uint64_t i = 0; i < tensors; ++i) {
    GgufTensor t;
    t.name = r.get_string();
    const uint32_t dims = r.get<uint32_t>();
    if (dims == 0 || dims > 8) fail("{}: tensor {} has {} dimensions", path.string(), t.name, dims);
    t.shape.resize(dims);
    for (uint32_t d = 0; d < dims; ++d) {
      const uint64_t ne = r.get<uint64_t>();
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("{}: tensor {} dimension {} is too large", path.string(), t.name, d);
      t.shape[dims - 1 - d] = static_cast<int64_t>(ne);
    }
    const uint32_t id = r.get<uint32_t>();
    const auto type = gguf_type_of_id(id);
    if (!type)
      fail("{}: tensor {} has ggml type {}, which rqat does not read", path.string(), t.name, id);
    t.type = *type;
    offsets.push_back(r.get<uint64_t>());
    c.tensors.push_back(std::move(t));
  }
  const uint64_t data_start = aligned(r.offset(), alignment);
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    auto& t = c.tensors[i];
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d)
      rows = product_or_fail({rows, t.shape[d]}, t.name);
    const auto bytes =
        static_cast<uint64_t>(gguf_tensor_bytes(t.type, t.shape.back(), rows, t.name));
    const uint64_t start = data_start + offsets[i];
    if (offsets[i] > r.bytes().size() || start > r.bytes().size() ||
        bytes > r.bytes().size() - start)
      fail("{}: tensor {} lies past the end of the file", path.string(), t.name);
    t.data = r.bytes().substr(start, bytes);
  }
  return c;
}

}  // namespace rqat::io

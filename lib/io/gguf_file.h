// GGUF v3 files, the container of llama.cpp (and ollama, LM Studio): a header, typed key-value
// metadata, a table of tensors (name, shape, ggml type, offset) and the tensors' bytes, each
// aligned to `general.alignment` (32 unless set). Little-endian throughout. This layer knows the
// container only; what the keys, names and block types mean for a model is quant/gguf/export.h's.
//
// Shapes are given in PyTorch order (outermost first, e.g. (out, in) for a linear weight); the
// file stores them innermost first (ggml's ne[0] = in), which is what the reader below returns
// reversed again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "io/enum_names.h"

namespace rqat::io {

// The tensor types rqat writes (ggml's names, lower case, as `--gguf-type` takes them).
enum class GgufType {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kCount
};
constexpr EnumNames<GgufType> enum_names(GgufType) {
  return {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
}

struct GgufTypeInfo {
  uint32_t ggml_id;        // ggml_type in ggml.h
  int64_t block_elements;  // consecutive elements of a row one block holds
  int64_t block_bytes;
};
GgufTypeInfo gguf_type_info(GgufType type);
std::optional<GgufType> gguf_type_of_id(uint32_t ggml_id);
// Bytes of a tensor of `elements` values per row... of `rows` rows; fails naming `what` when a row
// is not a whole number of blocks.
int64_t gguf_tensor_bytes(GgufType type, int64_t row_elements, int64_t rows,
                          const std::string& what);

// The value types of GGUF metadata that rqat writes (the format's ids in gguf_value_type_id).
using GgufValue = std::variant<uint32_t, int32_t, uint64_t, float, bool, std::string,
                               std::vector<std::string>, std::vector<int32_t>, std::vector<float>>;

struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // PyTorch order; rows of the last dimension are quantized blocks
  GgufType type = GgufType::kF32;
  std::string data;  // the tensor's bytes in that type
};

class GgufWriter {
 public:
  // Keys are written in the order they are added; a key added twice fails naming it.
  void add(std::string key, GgufValue value);
  void add_tensor(GgufTensor tensor);
  // Writes the file atomically (a temporary file, then a rename). Alignment: general.alignment
  // when added (a uint32 power of two), else 32.
  void write(const std::filesystem::path& path) const;
  size_t tensor_count() const { return tensors_.size(); }

 private:
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
};

// A file read back (tests, and `rqat info` of a GGUF): the metadata as typed values and each
// tensor's name, shape (PyTorch order), type and bytes. Errors name the file and what is wrong.
struct GgufContents {
  uint32_t version = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensor> tensors;
  const GgufValue* find(const std::string& key) const;
};
GgufContents read_gguf(const std::filesystem::path& path);

}  // namespace rqat::io

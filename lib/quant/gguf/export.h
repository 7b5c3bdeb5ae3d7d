// A model as a GGUF file that llama.cpp (and ollama, LM Studio) loads: the architecture's metadata
// under llama.cpp's names for qwen2, qwen3 and llama (sizes, heads, head size, RMSNorm epsilon,
// rope base, llama3 rope scaling as its rope_freqs tensor), the tokenizer (quant/gguf/tokenizer.h),
// and every weight under llama.cpp's tensor names: the matrices (embeddings, every projection,
// an untied output layer) in the chosen type, norms and biases as float32. For llama the q and k
// rows are reordered per head for llama.cpp's interleaved rope (Qwen's is the rotate-half one,
// as Hugging Face's). A type whose blocks do not divide a matrix's rows is refused before any
// work, naming the tensor and the type; the file is written atomically.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "io/gguf_file.h"
#include "model/decoder.h"
#include "quant/gguf/importance.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

struct GgufExportOptions {
  io::GgufType type = io::GgufType::kF16;  // the weight matrices'
  // The token embeddings' and output layer's, when not `type` (llama-quantize --pure uses one type
  // throughout; its mixes keep these in higher precision). rqat quantizes neither, so f32 keeps a
  // model exactly as rqat evaluated it.
  std::optional<io::GgufType> embedding_type;
  std::string name;  // general.name (empty: left out)
  // Layers on the grid of `type` (a ptq or QAT state made with --grid gguf-<type>), by module
  // name: written from their own codes and scales, and each checked to dequantize to the model's
  // weight exactly (else the export fails naming the layer). Other layers are quantized by
  // llama.cpp's reference quantizer. Not owned; may be null.
  const std::map<std::string, QuantizedWeight>* grid_layers = nullptr;
  // An importance matrix by GGUF tensor name (quant/gguf/importance.h): the matrices it names that
  // are quantized here (not written from codes) take llama.cpp's importance-matrix quantization,
  // as llama-quantize --imatrix. Not owned; may be null.
  const std::map<std::string, LayerImportance>* importance = nullptr;
};

struct GgufExportSummary {
  int64_t tensors = 0;
  int64_t grid_layers = 0;                      // written from their codes, with no rounding
  std::map<io::GgufType, int64_t> requantized;  // matrices by the reference quantizer, by type
  std::map<io::GgufType, int64_t> weighted;     // by the importance-matrix quantizer, by type
};

// model: a dense model (a packed one is loaded with LoadOptions::dequantize); its tokenizer files
// are read from the artifact `tokenizer` (the model's directory, opened once by the caller).
// The refusals of export_gguf that need no work (the architecture, rows that `type` cannot hold).
void check_gguf_exportable(const model::CausalLM& model, const GgufExportOptions& options);

GgufExportSummary export_gguf(const model::CausalLM& model, const io::Artifact& tokenizer,
                              const std::filesystem::path& out_file,
                              const GgufExportOptions& options);

}  // namespace rqat::quant

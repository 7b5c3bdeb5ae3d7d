// A model as a GGUF file that llama.cpp (and ollama, LM Studio) loads: the architecture's metadata
// under llama.cpp's names for qwen2, qwen3 and llama (sizes, heads, head size, RMSNorm epsilon,
// rope base, llama3 rope scaling as its rope_freqs tensor), the tokenizer (quant/gguf_tokenizer.h),
// and every weight under llama.cpp's tensor names: the matrices (embeddings, every projection,
// an untied output layer) in the chosen type, norms and biases as float32. For llama the q and k
// rows are reordered per head for llama.cpp's interleaved rope (Qwen's is the rotate-half one,
// as Hugging Face's). A type whose blocks do not divide a matrix's rows is refused before any
// work, naming the tensor and the type; the file is written atomically.
#pragma once

#include <filesystem>
#include <string>

#include "io/gguf_file.h"
#include "model/decoder.h"

namespace rqat::quant {

struct GgufExportOptions {
  io::GgufType type = io::GgufType::kF16;  // the weight matrices'
  std::string name;                        // general.name (empty: left out)
};

// model: a dense model (a packed one is loaded with LoadOptions::dequantize); its tokenizer files
// are read from tokenizer_dir.
void export_gguf(const model::CausalLM& model, const std::filesystem::path& tokenizer_dir,
                 const std::filesystem::path& out_file, const GgufExportOptions& options);

}  // namespace rqat::quant

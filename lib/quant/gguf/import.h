// A GGUF file back as a Hugging Face model directory, so that rqat (and transformers) can evaluate
// exactly what llama.cpp runs: every tensor dequantized by rqat's own dequantizers (bit for bit the
// values llama.cpp's gguf package reads), under Hugging Face names, llama's q/k rows back in
// rotate-half order; config.json from the copy rqat's export keeps in the file
// ("rqat.source_config"), else from llama.cpp's metadata (qwen2, qwen3, llama without llama3 rope
// scaling). The weights are stored float32. When every decoder-layer matrix is of one block type,
// the directory also gets their codes as a quant state on that type's grid (quant/gguf/grid.h):
// QAT, GRPO and the GGUF export then continue on the file's own grid, exactly.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace rqat::quant {

// tokenizer_dir: tokenizer files to copy into the directory (GGUF keeps the vocabulary, not a
// tokenizer.json), or none.
void import_gguf(const std::filesystem::path& file, const std::filesystem::path& out_dir,
                 const std::optional<std::filesystem::path>& tokenizer_dir);

}  // namespace rqat::quant

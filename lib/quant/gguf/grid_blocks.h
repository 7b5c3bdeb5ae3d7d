// GGUF blocks and weights on their grids (quant/gguf/grid.h), both ways: a tensor of a block type
// taken apart into codes, steps and mins, llama.cpp's reference quantization onto a grid, and the
// blocks written back from a grid weight's codes, exactly.
#pragma once

#include <ATen/Tensor.h>

#include <string>

#include "io/gguf_file.h"
#include "quant/gguf/grid.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// GGUF blocks (rows x cols values of `type`) as a weight on the grid; its dequantize() equals
// dequantize_gguf of the bytes value for value (-0 and +0 aside).
QuantizedWeight gguf_grid_from_blocks(io::GgufType type, const std::string& bytes, int64_t rows,
                                      int64_t cols);
// llama.cpp's reference quantization of w (out, in) onto the type's grid, or with an importance
// (in) its importance-matrix quantization (quant/gguf/quantize.h).
QuantizedWeight gguf_grid_quantize(io::GgufType type, const at::Tensor& w,
                                   const at::Tensor& importance = {});
// The GGUF bytes of a weight on the grid of `type` (its codes may differ from the ones it started
// with). Fails naming `name` when a scale or min is not one the type can store (not fp16, or not
// the super-block scale times an integer in range), which a frozen grid never produces.
std::string gguf_grid_to_blocks(io::GgufType type, const QuantizedWeight& w,
                                const std::string& name);

// The layer with its rows (outputs) in the order `index` (out) int64 gives: row r of the result is
// row index[r] of w (llama's q/k rows between Hugging Face's order and llama.cpp's).
QuantizedWeight select_rows(const QuantizedWeight& w, const at::Tensor& index);

}  // namespace rqat::quant

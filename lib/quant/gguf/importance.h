// Importance matrices for llama.cpp's grids (`ptq --grid gguf-TYPE --imatrix`): each input column
// of a layer weighs as its mean squared activation over the calibration tokens, as llama-imatrix
// measures it, and llama.cpp's importance-weighted quantization of the type chooses the scales
// (and, for RTN, the codes) with those weights (quant/gguf/quantize.h). rqat measures the inputs
// as they reach each layer in the model being quantized (the true-sequential PTQ of quant/ptq.h),
// where llama-imatrix runs the full-precision model.
//
// The matrices are written in llama.cpp's own imatrix file format (GGUF with general.type
// "imatrix": per layer `<tensor>.in_sum2` (sum of x^2 per column) and `<tensor>.counts`
// (tokens), imatrix.datasets/chunk_count/chunk_size), so that llama-quantize --imatrix can reuse
// them, and the weights rqat quantized with are exactly in_sum2 / counts in float32, as
// llama-quantize reads them.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace rqat::quant {

struct ImportanceOptions {
  bool imatrix = false;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.imatrix, "imatrix",
            "On a --grid gguf-TYPE: llama.cpp's importance-matrix quantization, each input column "
            "weighted by its mean squared calibration activation (needs --calib; writes "
            "OUT/imatrix.gguf for llama-quantize --imatrix)");
  }
};

struct LayerImportance {
  at::Tensor in_sum2;  // (in) float32: sum over the calibration tokens of x_j^2
  int64_t count = 0;   // tokens
  // The weights llama.cpp quantizes with: in_sum2 / count in float32 (all ones without tokens,
  // as llama-quantize does for a layer the calibration never reached).
  at::Tensor weights() const;
};

// From GPTQ's proxy Hessian H = 2/n sum x x^T over n tokens: in_sum2 = diag(H) / 2 * n.
LayerImportance importance_from_hessian(const at::Tensor& hessian, int64_t tokens);

struct ImatrixSource {
  std::string dataset;      // the calibration file
  int64_t chunk_count = 0;  // calibration sequences
  int64_t chunk_size = 0;   // tokens per sequence
};

// Writes llama.cpp's imatrix GGUF atomically; layers by Hugging Face module name
// ("model.layers.0.mlp.up_proj"), stored under their GGUF weight names ("blk.0.ffn_up.weight").
void write_gguf_imatrix(const std::filesystem::path& path,
                        const std::map<std::string, LayerImportance>& layers,
                        const ImatrixSource& source);

// llama.cpp's imatrix GGUF (llama-imatrix's, or rqat's own) by GGUF tensor name
// ("blk.0.ffn_up.weight"). One matrix per tensor (a mixture of experts' are refused); errors name
// the file and the tensor.
std::map<std::string, LayerImportance> read_gguf_imatrix(const std::filesystem::path& path);

// The layers of write_gguf_imatrix by their GGUF names, as read_gguf_imatrix returns them.
std::map<std::string, LayerImportance> by_gguf_name(
    const std::map<std::string, LayerImportance>& layers);

}  // namespace rqat::quant

// Post-training quantization of a whole model (RTN, GPTQ, AWQ), one decoder block at a time:
// the calibration samples' hidden states enter block 0; inside a block the layers are quantized
// in true-sequential order (q/k/v, then o, then gate/up, then down), each group calibrated on the
// inputs produced by the already-quantized layers before it; the block's outputs, computed with
// its quantized weights, are the next block's inputs. Only one block's activations live at a time.
#pragma once

#include <ATen/Tensor.h>

#include <functional>
#include <iosfwd>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "io/enum_names.h"
#include "model/decoder.h"
#include "quant/awq.h"
#include "quant/gguf/importance.h"
#include "quant/gptq.h"
#include "quant/nf4_linear.h"
#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

enum class PtqMethod { kRtn, kGptq, kAwq, kNf4, kCount };
constexpr EnumNames<PtqMethod> enum_names(PtqMethod) { return {"rtn", "gptq", "awq", "nf4"}; }

struct PtqOptions {
  PtqMethod method = PtqMethod::kGptq;
  QuantSpec spec;
  GptqOptions gptq;
  AwqOptions awq;
  Nf4Options
      nf4;  // method nf4: the spec's include/exclude select the layers; bits and groups unused
  ImportanceOptions importance;  // on a GGUF grid: llama.cpp's importance-matrix quantization
  int64_t batch_size = 8;        // calibration sequences per block forward
  bool verbose = true;           // one line per quantized layer on the log stream
  // Called with (blocks done, blocks) as a calibrated run starts each decoder block and at its
  // end: the ptq tool's progress.json (`rqat status`). Not called without calibration data.
  std::function<void(int64_t, int64_t)> on_block;
};

struct LayerReport {
  std::string name;
  int64_t out_features = 0, in_features = 0;
  // ||W X - Q X||^2 / ||W X||^2 over the layer's calibration inputs X (as they reach it in the
  // quantized model), computed from the Hessian; NaN without calibration data.
  double relative_error = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;  // quantizing the layer (calibration passes not included)
  // GPTQ only:
  double damp_used = std::numeric_limits<double>::quiet_NaN();
  int damp_increases = 0;
  int64_t dead_columns = 0;
};

struct PtqResult {
  std::map<std::string, QuantizedWeight> layers;              // by module name (uniform methods)
  std::vector<std::pair<std::string, Nf4Weight>> nf4_layers;  // method nf4, in model order
  std::vector<LayerReport> reports;                           // in quantization order
  std::vector<AwqGroupReport> awq_groups;             // AWQ: chosen scales per block and group
  std::map<std::string, LayerImportance> importance;  // --imatrix: what each layer was weighted by
  double seconds = 0;
  int64_t peak_activation_bytes = 0;  // hidden states and captured rows held at once
};

// Quantizes `model` in place: every layer the spec selects gets its dequantized weight (scales
// rounded to float16, as GPTQ checkpoints store them, so an export holds exactly these weights).
// calibration_ids: (N, T) int64 token ids; required for GPTQ and AWQ, optional for RTN (with it,
// RTN reports reconstruction errors), unused by NF4 (which also writes its decoded weights). Errors
// (spec, shapes, missing data) come before any work.
PtqResult quantize_model(model::CausalLM& model, const at::Tensor& calibration_ids,
                         const PtqOptions& options, std::ostream& log);

// A spec on a GGUF grid takes --method rtn or gptq (the others do not choose codes on it).
void check_grid_method(const QuantSpec& spec, PtqMethod method);
// What needs calibration data (--method gptq/awq, --imatrix) has it, and --imatrix has a grid;
// errors name the flag.
void check_calibration_needs(const PtqOptions& options, bool has_calibration);

// The true-sequential groups of a decoder block, as local names ("self_attn.q_proj", ...).
const std::vector<std::vector<std::string>>& sequential_groups();

}  // namespace rqat::quant

// The quantization section of the tools' configurations: a QuantSpec (its declaration) and the
// grid flag, which has its own spelling (gguf-q4_k), and for the trainers the quantizer's start
// and scale mode. ptq offers all of the spec; the trainers the RTN start's part of it.
#pragma once

#include <string>

#include "io/options.h"
#include "quant/fake_quant_linear.h"
#include "quant/quant_spec.h"
#include "train/qat_model.h"

namespace rqat::cli {

// --grid's help, shared by ptq and the trainers.
inline constexpr std::string_view kGridHelp =
    "Quantize on a format's own grid, which sets bits and groups and exports to it exactly: "
    "llama.cpp's GGUF types (gguf-q8_0, gguf-q4_0, gguf-q4_1, gguf-q2_k ... gguf-q6_k), the GPU "
    "engines' nvfp4, mxfp4 and fp8 (compressed-tensors), or int4-w4a16 (W4, groups of 128, "
    "symmetric)";

// ptq's: the spec and the grid.
struct PtqQuantConfig {
  quant::QuantSpec spec;
  std::string grid;  // "" (uniform), gguf-<type>, nvfp4, mxfp4, fp8 or int4-w4a16

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    io::section(v, "", self.spec);
    v.value(self.grid, "grid", kGridHelp);
  }
  // The spec with the grid applied; errors name --grid.
  quant::QuantSpec resolve() const;
};

// The trainers' (qat-sft, qat-kd, grpo): bits (0, their default: the input's quant state; 16:
// full precision), the RTN start's spec or grid, --init and the fake quantizer's options.
struct TrainQuantConfig {
  quant::QuantSpec spec{.bits = quant::QuantSpec::kBitsOfInput};
  std::string grid;
  train::QuantInit init = train::QuantInit::kAuto;
  quant::FakeQuantOptions fake_quant;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    // --clip and --v1-zeros are ptq's (an export sets v1 zeros itself).
    io::section(v, "", self.spec, {.skip = {"clip", "v1-zeros"}});
    v.value(self.grid, "grid", kGridHelp);
    v.value(self.init, "init",
            "Quantizer start: auto (quant state if present, else RTN), state or rtn");
    io::section(v, "", self.fake_quant);
  }
  // The spec with the grid applied, keeping bits as given (plan_quantization takes the grid's
  // when none were); errors name --grid.
  quant::QuantSpec resolve_spec() const;
};

}  // namespace rqat::cli

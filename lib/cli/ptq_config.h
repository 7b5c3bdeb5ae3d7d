// ptq's configuration, declared once (io/options.h): every flag, its help and group, and the
// manifest's record of the options derive from this (docs/ptq.md).
#pragma once

#include <optional>
#include <string>

#include "cli/quant_config.h"
#include "cli/runtime_flags.h"
#include "io/gguf_file.h"
#include "io/options.h"
#include "quant/calibration.h"
#include "quant/ptq.h"
#include "tools/ptq_command.h"

namespace rqat::cli {

struct PtqConfig {
  std::string model, out;
  quant::PtqOptions ptq;  // method, the method's options and batch size (spec: quant below)
  PtqQuantConfig quant;
  std::string calib;  // the calibration file; empty: none (rtn and nf4 need none)
  quant::CalibrationOptions calibration;
  std::string export_format;
  std::optional<io::GgufType> gguf_type, gguf_embedding_type;
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    io::heading(v, "Input and output");
    v.value(self.model, "model", "Input model directory (Hugging Face layout)", Role::kSetting,
            {.required = true});
    v.value(self.out, "out", "Output artifact directory", Role::kRunControl, {.required = true});
    io::heading(v, "Quantization");
    v.value(self.ptq.method, "method", "rtn, gptq, awq or nf4");
    io::section(v, "", self.quant);
    io::section(v, "GPTQ", self.ptq.gptq);
    io::section(v, "AWQ", self.ptq.awq, {.prefix = "awq-"});
    io::section(v, "NF4", self.ptq.nf4);
    io::section(v, "GGUF grids", self.ptq.importance);
    io::heading(v, "Calibration");
    v.value(self.ptq.batch_size, "batch-size", "Calibration sequences per forward",
            Role::kRunControl);
    v.value(self.calib, "calib", "Calibration data: plain text or JSONL");
    io::section(v, "", self.calibration.data,
                {.prefix = "calib-", .rename = {{"text-field", "field"}}});
    v.value(self.calibration.num_samples, "calib-samples", "Calibration sequences");
    v.value(self.calibration.seq_len, "calib-seq-len", "Tokens per calibration sequence");
    v.value(self.calibration.seed, "calib-seed", "Seed of the sample draw");
    io::heading(v, "Export");
    v.value(self.export_format, "export",
            "Also write a packed checkpoint: OUT/gptq (gptq v1 or gptq_v2), OUT/bnb for "
            "--method nf4 (bnb: bitsandbytes 4-bit), OUT/model-TYPE.gguf (gguf), or "
            "OUT/compressed-tensors (compressed-tensors: vLLM's and SGLang's format)");
    v.value(self.gguf_type, "gguf-type",
            "With --export gguf: the matrices' GGUF type (default: the --grid's)");
    v.value(self.gguf_embedding_type, "gguf-embedding-type",
            "With --export gguf: the embeddings' and output layer's type (default: --gguf-type; "
            "f32 keeps them as rqat has them)");
    io::section(v, "Runtime", self.runtime);
  }

  // The command's options (errors name the flag); also applies the runtime flags.
  tools::PtqCommandOptions resolve() const;
};

}  // namespace rqat::cli

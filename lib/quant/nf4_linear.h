// A linear layer whose weight stays NF4 (quant/nf4.h): packed 4-bit codes and per-block scales
// (double-quantized or not) are all it keeps, about 0.53 bytes per weight instead of 2 or 4; each
// forward decodes the weight into the input's dtype for that call and multiplies, as bitsandbytes'
// Linear4bit does outside its fused kernels. The frozen base of QLoRA-style training (grpo
// --mode qlora --qlora-base nf4): it has no parameters, so only the adapters over it train.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "model/decoder.h"
#include "model/linear.h"
#include "quant/nf4.h"
#include "quant/quant_spec.h"

namespace rqat::quant {

// NF4 settings of ptq --method nf4 and grpo --qlora-base nf4. Defaults are bitsandbytes'
// (BitsAndBytesConfig: blocks of 64, no double quantization); study A's QLoRA uses double
// quantization.
struct Nf4Options {
  int64_t block_size = kNf4Format.sub_block;
  bool double_quant = false;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.block_size, "nf4-block-size", "NF4: weights per absmax block");
    v.value(self.double_quant, "nf4-double-quant",
            "NF4: quantize the absmax values too (8-bit, blocks of 256: QLoRA's)");
  }
  // The quantization record of manifests and fingerprints: bits, block as group_size (so tables
  // show W4G64), format nf4.
  io::Json to_json(const QuantSpec& selection) const;
};

class Nf4Linear : public model::Linear {
 public:
  Nf4Linear(Nf4Weight weight, std::optional<at::Tensor> bias);
  // NF4 of a full-precision weight (out, in).
  static std::shared_ptr<Nf4Linear> quantize(const at::Tensor& weight,
                                             const std::optional<at::Tensor>& bias,
                                             int64_t block_size, bool double_quant);

  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return weight_.shape[1]; }
  int64_t out_features() const override { return weight_.shape[0]; }
  at::Tensor effective_weight() const override;  // decoded, float32
  std::optional<at::Tensor> bias() const override;
  const Nf4Weight& nf4() const { return weight_; }

 private:
  Nf4Weight weight_;
  at::Tensor bias_;  // (out) float32 or undefined
};

// Replaces every linear layer `spec` selects (its include/exclude patterns) by an Nf4Linear of
// its current weight; returns their names and the NF4 weights in model order.
std::vector<std::pair<std::string, Nf4Weight>> attach_nf4(model::CausalLM& model,
                                                          const QuantSpec& spec, int64_t block_size,
                                                          bool double_quant);

}  // namespace rqat::quant

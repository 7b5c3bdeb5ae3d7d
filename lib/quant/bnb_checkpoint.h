// bitsandbytes 4-bit checkpoints, as transformers saves and loads them (quantization_config
// quant_method "bitsandbytes", load_in_4bit, bnb_4bit_quant_type "nf4"): every NF4 layer NAME is
// stored as NAME.weight (uint8 (ceil(n / 2), 1): the packed codes, first element in the high
// nibble), NAME.weight.absmax (float32, or with double quantization uint8 codes plus
// NAME.weight.nested_absmax and NAME.weight.nested_quant_map), NAME.weight.quant_map (the 16 NF4
// levels) and NAME.weight.quant_state.bitsandbytes__nf4 (uint8 bytes of a JSON object: quant_type,
// blocksize, dtype, shape, and nested_blocksize / nested_dtype / nested_offset); every other tensor
// as usual. transformers with bitsandbytes (and accelerate) loads it on the CPU or a GPU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/decoder.h"
#include "quant/nf4.h"

namespace rqat::quant {

struct BnbExportOptions {
  at::ScalarType dtype = at::kFloat;  // the full-precision tensors and bnb_4bit_compute_dtype
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Writes `dir` from `model` (its state for everything not in `layers`) and the NF4 weights of
// `layers`. Throws naming the layer when a weight's shape disagrees with the model's.
void export_bnb_checkpoint(const model::CausalLM& model,
                           const std::vector<std::pair<std::string, Nf4Weight>>& layers,
                           const std::filesystem::path& dir, const BnbExportOptions& options);

}  // namespace rqat::quant

// Random initialization of a CausalLM in the way transformers initializes these families
// (normal(0, std) weights, zero biases, unit norms), deterministic for a seed on any device.
#pragma once

#include <cstdint>

#include "model/decoder.h"

namespace rqat::model {

void init_random(CausalLM& model, uint64_t seed, double std = 0.02);

}  // namespace rqat::model

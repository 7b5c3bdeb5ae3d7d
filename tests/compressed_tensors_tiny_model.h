// The tiny model of the compressed-tensors tests (test_compressed_tensors, and the fixture program
// of tests/python/test_compressed_tensors_peer.py): a random qwen3 whose every matrix is a multiple
// of 32 wide (hidden 64, q 4 x 16, kv 2 x 16, intermediate 128), so that every scheme holds it.
#pragma once

#include <cstdint>
#include <memory>

#include "model/decoder.h"
#include "model/init.h"
#include "model/model_config.h"

namespace rqat::test {

inline std::shared_ptr<model::CausalLM> compressed_tensors_tiny_model(at::ScalarType dtype,
                                                                      uint64_t seed) {
  io::Json j = {{"model_type", "qwen3"},    {"hidden_size", 64},
                {"intermediate_size", 128}, {"num_hidden_layers", 2},
                {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                {"head_dim", 16},           {"vocab_size", 97},
                {"rms_norm_eps", 1e-6},     {"tie_word_embeddings", false},
                {"rope_theta", 1000000.0},  {"max_position_embeddings", 128}};
  auto model = std::make_shared<model::CausalLM>(model::ModelConfig::from_json(j, "tiny"),
                                                 at::TensorOptions(dtype));
  model::init_random(*model, seed, 0.1);
  return model;
}

}  // namespace rqat::test

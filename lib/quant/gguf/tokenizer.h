// The tokenizer of a Hugging Face model directory as GGUF metadata, so that llama.cpp tokenizes
// and chats as rqat does: a byte-level BPE tokenizer.json (Qwen2/2.5/3, Llama 3, rqat tiny-task's)
// becomes tokenizer.ggml.model "gpt2" with its pre-tokenizer ("qwen2": digits one at a time;
// "llama-bpe": up to three), every token string at its id (vocab and added tokens; ids the
// tokenizer lacks up to the model's vocab_size as "[PAD<id>]", unused), their types (added tokens
// that are special, or look like "<|...|>", are control tokens; other added tokens user-defined;
// the rest normal), the merges in rank order, the bos/eos/padding ids, whether a BOS is added,
// and tokenizer_config.json's chat template.
#pragma once

#include <cstdint>
#include <filesystem>

#include "io/gguf_file.h"
#include "model/model_config.h"

namespace rqat::quant {

// Adds the tokenizer.* keys of `dir`'s tokenizer files to `writer`; errors name the file and what
// GGUF cannot express (another model type than BPE, no byte-level alphabet, an unknown
// pre-tokenizer, a vocabulary larger than the model's).
void add_gguf_tokenizer(io::GgufWriter& writer, const io::Artifact& artifact,
                        const model::ModelConfig& config);

}  // namespace rqat::quant

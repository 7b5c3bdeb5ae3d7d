// See llama2c_convert.h. The layouts follow llama2.c's export.py (legacy_export, version1_export)
// and run.c (memory_map_weights, the RoPE loop in forward()).
#include "tools/llama2c_convert.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "io/checked_size.h"
#include "io/error.h"
#include "model/decoder.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "tokenizer/llama2c_vocab.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::model;

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x616b3432;  // "ak42" read as a little-endian uint32
constexpr size_t kV1HeaderBytes = 256;
constexpr int64_t kMaxDim = int64_t{1} << 20;  // guards the size arithmetic against garbage

std::string describe(const Llama2cHeader& h) {
  return fmt::format(
      "dim {}, hidden_dim {}, {} layers, {} heads, {} kv heads, vocab {} ({} classifier), seq_len "
      "{}",
      h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size,
      h.shared_classifier ? "shared" : "unshared", h.seq_len);
}

Llama2cHeader parse_header(const std::array<char, kV1HeaderBytes>& raw, size_t raw_size,
                           const std::string& where) {
  auto i32 = [&](size_t offset) {
    int32_t v = 0;
    std::memcpy(&v, raw.data() + offset, 4);
    return v;
  };
  if (raw_size < 28)
    fail("{}: {} bytes, too short for a llama2.c checkpoint header", where, raw_size);
  Llama2cHeader h;
  size_t params = 0;  // offset of the 7 ints
  uint32_t magic = 0;
  std::memcpy(&magic, raw.data(), 4);
  if (magic == kMagic) {
    if (raw_size < kV1HeaderBytes)
      fail("{}: {} bytes, too short for a llama2.c v1 header ({} bytes)", where, raw_size,
           kV1HeaderBytes);
    h.version = i32(4);
    if (h.version == 2)
      fail("{}: a llama2.c version 2 (int8 Q8_0) checkpoint; only float32 (v0, v1) converts",
           where);
    if (h.version != 1) fail("{}: unknown llama2.c checkpoint version {}", where, h.version);
    params = 8;
    h.shared_classifier = raw[36] != 0;
  }
  h.dim = i32(params);
  h.hidden_dim = i32(params + 4);
  h.n_layers = i32(params + 8);
  h.n_heads = i32(params + 12);
  h.n_kv_heads = i32(params + 16);
  h.vocab_size = i32(params + 20);
  h.seq_len = i32(params + 24);
  if (h.version == 0) {
    h.shared_classifier = h.vocab_size > 0;  // the legacy export's flag
    h.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  }
  const std::pair<const char*, int64_t> fields[] = {
      {"dim", h.dim},         {"hidden_dim", h.hidden_dim}, {"n_layers", h.n_layers},
      {"n_heads", h.n_heads}, {"n_kv_heads", h.n_kv_heads}, {"vocab_size", h.vocab_size},
      {"seq_len", h.seq_len}};
  for (const auto& [name, value] : fields) {
    if (value <= 0 || value > kMaxDim) {
      fail("{}: header field {} is {}, not a llama2.c checkpoint (or a damaged one)", where, name,
           value);
    }
  }
  if (h.dim % h.n_heads != 0 || h.head_size() % 2 != 0)
    fail("{}: header: dim {} is not n_heads {} x an even head size", where, h.dim, h.n_heads);
  if (h.n_heads % h.n_kv_heads != 0)
    fail("{}: header: n_kv_heads {} does not divide n_heads {}", where, h.n_kv_heads, h.n_heads);
  return h;
}

// The float32 payload, cut into arrays in file order.
class Payload {
 public:
  explicit Payload(at::Tensor data) : data_(std::move(data)) {}
  at::Tensor next(at::IntArrayRef shape) {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    at::Tensor t = data_.narrow(0, offset_, n).view(shape);
    offset_ += n;
    return t;
  }
  void skip(int64_t n) { offset_ += n; }

 private:
  at::Tensor data_;
  int64_t offset_ = 0;
};

// The payload's float count, or nullopt when the header's sizes overflow int64: each field is at
// most 2^20, yet 3 x n_layers x dim x hidden_dim alone can reach 3 x 2^60.
std::optional<int64_t> payload_floats(const Llama2cHeader& h) {
  using io::checked_product;
  const int64_t L = h.n_layers, d = h.dim;
  const std::optional<int64_t> parts[] = {
      checked_product({h.vocab_size, d}),                                // embedding
      checked_product({2, L, d}), d,                                     // norms
      checked_product({2, L, d, d}),                                     // wq, wo
      checked_product({2, L, d, h.kv_dim()}),                            // wk, wv
      checked_product({3, L, d, h.hidden_dim}),                          // w1, w2, w3
      h.version == 0 ? checked_product({h.seq_len, h.head_size()}) : 0,  // RoPE tables (v0)
      h.shared_classifier ? 0 : checked_product({h.vocab_size, d}),     // classifier
  };
  std::optional<int64_t> total = 0;
  for (const auto& part : parts) {
    if (!total || !part) return std::nullopt;
    total = io::checked_add(*total, *part);
  }
  return total;
}

}  // namespace

at::Tensor interleaved_to_half_rotary(const at::Tensor& weight, int64_t heads) {
  const int64_t rows = weight.size(0), cols = weight.size(1);
  const int64_t head = rows / heads;
  return weight.reshape({heads, head / 2, 2, cols})
      .transpose(1, 2)
      .reshape({rows, cols})
      .contiguous();
}

Llama2cCheckpoint read_llama2c_checkpoint(const fs::path& path) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the llama2.c checkpoint", where);
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) fail("{}: cannot read the file size: {}", where, ec.message());

  std::array<char, kV1HeaderBytes> raw{};
  in.read(raw.data(), static_cast<std::streamsize>(std::min<uint64_t>(file_size, raw.size())));
  const Llama2cHeader h = parse_header(raw, static_cast<size_t>(in.gcount()), where);
  const uint64_t header_bytes = h.version == 0 ? 28 : kV1HeaderBytes;
  const std::optional<int64_t> floats = payload_floats(h);
  if (!floats || static_cast<uint64_t>(*floats) > (UINT64_MAX - header_bytes) / 4)
    fail("{}: the header's sizes ({}) describe more weights than any file holds", where, describe(h));
  const uint64_t expected = header_bytes + static_cast<uint64_t>(*floats) * 4;
  if (file_size != expected) {
    fail("{}: {} bytes, but a llama2.c v{} checkpoint with {} has {} bytes ({})", where, file_size,
         h.version, describe(h), expected,
         file_size < expected ? "truncated" : "trailing data, or not this format");
  }
  at::Tensor data = at::empty({*floats}, at::kFloat);
  in.clear();
  in.seekg(static_cast<std::streamoff>(header_bytes));
  in.read(static_cast<char*>(data.data_ptr()), static_cast<std::streamsize>(*floats * 4));
  if (in.gcount() != *floats * 4) fail("{}: read failed after {} bytes", where, in.gcount());

  const int64_t L = h.n_layers, d = h.dim, hid = h.hidden_dim, kv = h.kv_dim();
  Payload p(data);
  at::Tensor embed, att_norm, ffn_norm, final_norm, wq, wk, wv, wo, w1, w2, w3, cls;
  if (h.version == 0) {
    embed = p.next({h.vocab_size, d});
    att_norm = p.next({L, d});
    wq = p.next({L, d, d});
    wk = p.next({L, kv, d});
    wv = p.next({L, kv, d});
    wo = p.next({L, d, d});
    ffn_norm = p.next({L, d});
    w1 = p.next({L, hid, d});
    w2 = p.next({L, d, hid});
    w3 = p.next({L, hid, d});
    final_norm = p.next({d});
    p.skip(h.seq_len * h.head_size());  // RoPE cos/sin tables: run.c recomputes them
  } else {
    att_norm = p.next({L, d});
    ffn_norm = p.next({L, d});
    final_norm = p.next({d});
    embed = p.next({h.vocab_size, d});
    wq = p.next({L, d, d});
    wk = p.next({L, kv, d});
    wv = p.next({L, kv, d});
    wo = p.next({L, d, d});
    w1 = p.next({L, hid, d});
    w2 = p.next({L, d, hid});
    w3 = p.next({L, hid, d});
  }
  if (!h.shared_classifier) cls = p.next({h.vocab_size, d});

  Llama2cCheckpoint out;
  out.header = h;
  auto& t = out.tensors;
  t.emplace_back("model.embed_tokens.weight", embed);
  for (int64_t l = 0; l < L; ++l) {
    const std::string prefix = fmt::format("model.layers.{}.", l);
    t.emplace_back(prefix + "input_layernorm.weight", att_norm[l]);
    t.emplace_back(prefix + "self_attn.q_proj.weight",
                   interleaved_to_half_rotary(wq[l], h.n_heads));
    t.emplace_back(prefix + "self_attn.k_proj.weight",
                   interleaved_to_half_rotary(wk[l], h.n_kv_heads));
    t.emplace_back(prefix + "self_attn.v_proj.weight", wv[l]);
    t.emplace_back(prefix + "self_attn.o_proj.weight", wo[l]);
    t.emplace_back(prefix + "post_attention_layernorm.weight", ffn_norm[l]);
    t.emplace_back(prefix + "mlp.gate_proj.weight", w1[l]);  // silu(w1 x) * (w3 x), then w2
    t.emplace_back(prefix + "mlp.up_proj.weight", w3[l]);
    t.emplace_back(prefix + "mlp.down_proj.weight", w2[l]);
  }
  t.emplace_back("model.norm.weight", final_norm);
  if (cls.defined()) t.emplace_back("lm_head.weight", cls);
  return out;
}

io::Json llama2c_config_json(const Llama2cHeader& h) {
  return io::Json{{"architectures", io::Json::array({"LlamaForCausalLM"})},
                  {"model_type", "llama"},
                  {"vocab_size", h.vocab_size},
                  {"hidden_size", h.dim},
                  {"intermediate_size", h.hidden_dim},
                  {"num_hidden_layers", h.n_layers},
                  {"num_attention_heads", h.n_heads},
                  {"num_key_value_heads", h.n_kv_heads},
                  {"head_dim", h.head_size()},
                  {"hidden_act", "silu"},
                  {"max_position_embeddings", h.seq_len},
                  {"rms_norm_eps", 1e-5},
                  {"rope_theta", 10000.0},
                  {"rope_scaling", nullptr},
                  {"tie_word_embeddings", h.shared_classifier},
                  {"attention_bias", false},
                  {"attention_dropout", 0.0},
                  {"mlp_bias", false},
                  {"initializer_range", 0.02},
                  {"use_cache", true},
                  {"bos_token_id", 1},
                  {"eos_token_id", 2},
                  {"torch_dtype", "float32"}};
}

void convert_llama2c(const Llama2cConvertOptions& options) {
  const Llama2cCheckpoint checkpoint = read_llama2c_checkpoint(options.checkpoint);
  const Llama2cHeader& h = checkpoint.header;
  std::optional<tokenizer::HfTokenizerFiles> tokenizer_files;
  if (options.tokenizer_bin) {
    const std::string where = options.tokenizer_bin->string();
    const tokenizer::Llama2cVocab vocab = tokenizer::read_llama2c_vocab(*options.tokenizer_bin);
    if (static_cast<int64_t>(vocab.pieces.size()) != h.vocab_size) {
      fail("{}: {} tokens, but the checkpoint {} has vocab_size {}", where, vocab.pieces.size(),
           options.checkpoint.string(), h.vocab_size);
    }
    tokenizer_files = tokenizer::llama2c_vocab_to_hf(vocab, h.seq_len, where);
  }

  const ModelConfig config =
      ModelConfig::from_json(llama2c_config_json(h), options.checkpoint.string());
  CausalLM model(config, at::TensorOptions().dtype(at::kFloat));
  std::map<std::string, at::Tensor> by_name(checkpoint.tensors.begin(), checkpoint.tensors.end());
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const auto it = by_name.find(item.key());
    // Both sides are built here from the same header: a mismatch is a bug, not bad input.
    if (it == by_name.end() || it->second.sizes() != item.value().sizes())
      fail("llama2.c conversion: no tensor of the right shape for '{}'", item.key());
    item.value().set_data(it->second.contiguous());
    ++used;
  }
  if (used != by_name.size())
    fail("llama2.c conversion: {} tensors converted but the model has {}", by_name.size(), used);

  SaveOptions save;
  save.dtype = options.dtype;
  save.max_shard_bytes = options.max_shard_bytes;
  save_causal_lm(model, options.out_dir, save);
  if (tokenizer_files) {
    io::write_json_file(options.out_dir / "tokenizer.json", tokenizer_files->tokenizer);
    io::write_json_file(options.out_dir / "tokenizer_config.json", tokenizer_files->config);
  }
}

}  // namespace rqat::tools

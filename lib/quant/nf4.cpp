#include "quant/nf4.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "io/error.h"

namespace rqat::quant {

namespace {

at::Tensor levels_on(const at::Device& device) {
  return at::tensor(std::vector<float>(kNf4Levels.begin(), kNf4Levels.end()),
                    at::TensorOptions().dtype(at::kFloat).device(device));
}

// The element count of q's shape, after checking that its buffers have the sizes it implies.
int64_t checked_numel(const Nf4Weight& q) {
  int64_t n = 1;
  for (int64_t d : q.shape) n *= d;
  if (q.block_size < 2 || !q.packed.defined() || !q.absmax.defined() ||
      q.packed.numel() != (n + 1) / 2 || q.absmax.numel() != (n + q.block_size - 1) / q.block_size)
    fail("nf4: {} codes need {} packed bytes and {} absmax values (block {}), got {} and {}", n,
         (n + 1) / 2, q.block_size < 2 ? 0 : (n + q.block_size - 1) / q.block_size, q.block_size,
         q.packed.defined() ? q.packed.numel() : 0, q.absmax.defined() ? q.absmax.numel() : 0);
  return n;
}

// The flat values padded with zeros to whole blocks: (blocks, block_size).
at::Tensor as_blocks(const at::Tensor& flat, int64_t block_size) {
  const int64_t n = flat.numel();
  const int64_t blocks = (n + block_size - 1) / block_size;
  return at::constant_pad_nd(flat, {0, blocks * block_size - n}).view({blocks, block_size});
}

// Nearest entry of an ascending table through the midpoints (ties take the lower entry).
at::Tensor nearest_index(const at::Tensor& values, const at::Tensor& table) {
  const int64_t n = table.size(0);
  const at::Tensor midpoints = (table.slice(0, 0, n - 1) + table.slice(0, 1, n)) / 2;
  return at::bucketize(values, midpoints, /*out_int32=*/false, /*right=*/false);
}

// Double quantization of the absmax values: fills q's codes, nested absmax, offset, and replaces
// q.absmax by the decoded values.
void double_quantize(Nf4Weight& q) {
  const at::Tensor absmax = q.absmax;
  const auto& map = dynamic_map_signed();
  const at::Tensor table =
      at::tensor(std::vector<float>(map.begin(), map.end()),
                 at::TensorOptions().dtype(at::kFloat).device(absmax.device()));
  const at::Tensor offset = absmax.mean();
  const at::Tensor centered = absmax - offset;
  const at::Tensor blocks = as_blocks(centered, kNf4NestedBlockSize);
  const at::Tensor nested = blocks.abs().amax(1);
  const at::Tensor scaled =
      at::clamp(blocks / at::where(nested > 0, nested, at::ones_like(nested)).unsqueeze(1), -1, 1);
  const at::Tensor codes =
      nearest_index(scaled.view({-1}), table).slice(0, 0, absmax.numel()).to(at::kByte);
  const at::Tensor decoded =
      as_blocks(table.index_select(0, codes.to(at::kLong)), kNf4NestedBlockSize) *
      nested.unsqueeze(1);
  q.double_quant = true;
  q.absmax_codes = codes.contiguous();
  q.nested_absmax = nested.contiguous();
  q.offset = offset.item<float>();
  q.absmax = (decoded.view({-1}).slice(0, 0, absmax.numel()) + q.offset).contiguous();
}

}  // namespace

const std::array<float, 256>& dynamic_map_signed() {
  static const std::array<float, 256> map = [] {
    std::vector<float> data;
    for (int i = 0; i < 7; ++i) {
      const int64_t items = (int64_t{1} << i) + 1;
      const at::Tensor bounds = at::linspace(0.1, 1, items, at::kFloat);
      const at::Tensor means = (bounds.slice(0, 0, items - 1) + bounds.slice(0, 1, items)) / 2.0;
      const double magnitude = std::pow(10.0, i - 6);
      for (const at::Tensor& part : {means * magnitude, means * -magnitude}) {
        const at::Tensor c = part.contiguous();
        data.insert(data.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      }
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    std::sort(data.begin(), data.end());
    std::array<float, 256> out{};
    std::copy(data.begin(), data.end(), out.begin());
    return out;
  }();
  return map;
}

Nf4Weight nf4_quantize(const at::Tensor& w, int64_t block_size, bool double_quant) {
  if (block_size < 2 || block_size % 2 != 0)
    fail("nf4: the block size must be an even number >= 2, got {}", block_size);
  if (!w.defined() || w.numel() == 0) fail("nf4: the weight is empty");
  const at::Tensor flat = w.detach().to(at::kFloat).contiguous().view({-1});
  if (!at::isfinite(flat).all().item<bool>()) fail("nf4: the weight has non-finite values");
  const at::Tensor blocks = as_blocks(flat, block_size);
  const at::Tensor absmax = blocks.abs().amax(1);
  // An all-zero block divides by 1 instead: its values are 0, level 7.
  const at::Tensor scaled =
      blocks / at::where(absmax > 0, absmax, at::ones_like(absmax)).unsqueeze(1);
  // Nearest level through the midpoints between neighbours: bucketize with right=false puts a
  // value equal to a midpoint below it, i.e. a tie takes the lower level.
  const at::Tensor codes = nearest_index(scaled, levels_on(w.device()))
                               .view({-1})
                               .slice(0, 0, flat.numel())
                               .to(at::kByte);
  const at::Tensor even = at::constant_pad_nd(codes, {0, codes.numel() % 2}).view({-1, 2});
  Nf4Weight q;
  q.packed = (even.select(1, 0) * 16 + even.select(1, 1)).to(at::kByte).contiguous();
  q.absmax = absmax.contiguous();
  q.shape = w.sizes().vec();
  q.block_size = block_size;
  if (double_quant) double_quantize(q);
  return q;
}

at::Tensor nf4_codes(const Nf4Weight& q) {
  const int64_t n = checked_numel(q);
  const at::Tensor bytes = q.packed.to(at::kInt);
  const at::Tensor pairs = at::stack({at::floor_divide(bytes, 16), at::remainder(bytes, 16)}, 1);
  return pairs.view({-1}).slice(0, 0, n).to(at::kByte).view(q.shape);
}

at::Tensor nf4_dequantize(const Nf4Weight& q, at::ScalarType dtype) {
  const int64_t n = checked_numel(q);
  const at::Tensor codes = nf4_codes(q).view({-1}).to(at::kLong);
  const at::Tensor values = levels_on(q.packed.device()).index_select(0, codes);
  const at::Tensor scaled = as_blocks(values, q.block_size) * q.absmax.to(at::kFloat).unsqueeze(1);
  return scaled.view({-1}).slice(0, 0, n).view(q.shape).to(dtype);
}

}  // namespace rqat::quant

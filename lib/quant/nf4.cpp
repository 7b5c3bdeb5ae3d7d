#include "quant/nf4.h"

#include <ATen/ATen.h>

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

}  // namespace

Nf4Weight nf4_quantize(const at::Tensor& w, int64_t block_size) {
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
  const at::Tensor levels = levels_on(w.device());
  const at::Tensor midpoints = (levels.slice(0, 0, 15) + levels.slice(0, 1, 16)) / 2;
  const at::Tensor codes = at::bucketize(scaled, midpoints, /*out_int32=*/false, /*right=*/false)
                               .view({-1})
                               .slice(0, 0, flat.numel())
                               .to(at::kByte);
  const at::Tensor even = at::constant_pad_nd(codes, {0, codes.numel() % 2}).view({-1, 2});
  Nf4Weight q;
  q.packed = (even.select(1, 0) * 16 + even.select(1, 1)).to(at::kByte).contiguous();
  q.absmax = absmax.contiguous();
  q.shape = w.sizes().vec();
  q.block_size = block_size;
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

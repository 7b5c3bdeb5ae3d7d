// See grid.h: the grids' definitions and checks (the blocks are grid_blocks.cpp's).
#include "quant/gguf/grid.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <vector>

#include "io/error.h"

namespace rqat::quant {

using io::GgufType;

bool has_gguf_grid(io::GgufType type) {
  return type != GgufType::kF32 && type != GgufType::kF16 && type != GgufType::kBF16 &&
         type != GgufType::kCount;
}

GgufGridInfo gguf_grid_info(io::GgufType type, std::string_view where) {
  switch (type) {
    case GgufType::kQ8_0:
      return {8, 32, 32, false, 128, false};
    case GgufType::kQ4_0:
      return {4, 32, 32, false, 8, false};
    case GgufType::kQ4_1:
      return {4, 32, 32, true, 0, false};
    case GgufType::kQ2_K:
      return {2, 16, 256, true, 0, true};
    case GgufType::kQ3_K:
      return {3, 16, 256, false, 4, true};
    case GgufType::kQ4_K:
      return {4, 32, 256, true, 0, true};
    case GgufType::kQ5_K:
      return {5, 32, 256, true, 0, true};
    case GgufType::kQ6_K:
      return {6, 16, 256, false, 32, true};
    default:
      fail(
          "{}: {} is no block type with a grid (gguf-q8_0, gguf-q4_0, gguf-q4_1, gguf-q2_k, "
          "gguf-q3_k, gguf-q4_k, gguf-q5_k, gguf-q6_k)",
          where, enum_name(type));
  }
}

io::GgufType parse_gguf_grid(std::string_view name, std::string_view where) {
  constexpr std::string_view prefix = "gguf-";
  if (name.starts_with(prefix)) {
    const std::string_view type = name.substr(prefix.size());
    for (int i = 0; i < static_cast<int>(GgufType::kCount); ++i) {
      const auto t = static_cast<GgufType>(i);
      if (enum_name(t) == type && has_gguf_grid(t)) return t;
    }
  }
  fail(
      "{} = '{}': known grids are gguf-q8_0, gguf-q4_0, gguf-q4_1, gguf-q2_k, gguf-q3_k, "
      "gguf-q4_k, gguf-q5_k, gguf-q6_k",
      where, name);
}

std::string gguf_grid_name(io::GgufType type) { return fmt::format("gguf-{}", enum_name(type)); }

at::Tensor grid_values(const at::Tensor& codes, const at::Tensor& scales, const at::Tensor& offsets,
                       bool min_form) {
  return min_form ? scales * codes - offsets : (codes - offsets) * scales;
}

void validate_gguf_grid(const QuantizedWeight& w, const std::string& name) {
  const GgufGridInfo grid = gguf_grid_info(*w.gguf_grid, name);
  const std::string type = gguf_grid_name(*w.gguf_grid);
  if (w.bits != grid.bits || w.group_size != grid.sub_block)
    fail("{}: the {} grid has {}-bit codes in groups of {}, not {} and {}", name, type, grid.bits,
         grid.sub_block, w.bits, w.group_size);
  const int64_t rows = w.out_features(), cols = w.in_features();
  if (cols % grid.block != 0)
    fail("{}: rows of {} values are not a whole number of {}-value {} blocks", name, cols,
         grid.block, type);
  const at::Tensor contiguous = at::arange(cols, at::kInt).floor_divide(grid.sub_block);
  if (!at::equal(w.g_idx.cpu(), contiguous))
    fail("{}: a {} layer has contiguous groups (no act-order g_idx)", name, type);
  if (w.scales.numel() > 0) {
    if (!(w.scales >= 0).all().item<bool>() || !at::isfinite(w.scales).all().item<bool>())
      fail("{}: scales must be finite and >= 0", name);
    if (!at::isfinite(w.zeros).all().item<bool>()) fail("{}: zeros must be finite", name);
  }
  if (!grid.min_form && w.zeros.numel() > 0) {
    const double mirrored = static_cast<double>((1 << grid.bits) - 1 - grid.zero);
    if (!at::logical_or(w.zeros == grid.zero, w.zeros == mirrored).all().item<bool>())
      fail("{}: the {} grid's zero points are {} (or {} mirrored)", name, type, grid.zero,
           mirrored);
  }
  if (grid.super_scales) {
    const std::vector<int64_t> shape = {rows, cols / grid.block, 2};
    if (!w.super_scales.defined() || w.super_scales.sizes() != at::IntArrayRef(shape) ||
        w.super_scales.scalar_type() != at::kFloat ||
        !at::isfinite(w.super_scales).all().item<bool>())
      fail("{}: a {} layer needs finite float32 super_scales ({}, {}, 2)", name, type, rows,
           cols / grid.block);
  }
}

}  // namespace rqat::quant

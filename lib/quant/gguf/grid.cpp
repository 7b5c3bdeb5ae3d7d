// See grid.h: the grids' definitions and checks (the blocks are grid_blocks.cpp's).
#include "quant/gguf/grid.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <vector>

#include "io/error.h"
#include "ops/weight_formats.h"

namespace rqat::quant {

using io::GgufType;

// The rows of ops/weight_formats.h's table on a GGUF grid are the only definitions of the grids.
bool has_gguf_grid(io::GgufType type) { return ops::gguf_weight_format(type) != nullptr; }

GgufGridInfo gguf_grid_info(io::GgufType type, std::string_view where) {
  const ops::WeightFormat* format = ops::gguf_weight_format(type);
  if (format == nullptr)
    fail("{}: {} is no block type with a grid ({})", where, enum_name(type),
         ops::weight_format_names(ops::WeightGrid::kGguf));
  return *format;
}

io::GgufType parse_gguf_grid(std::string_view name, std::string_view where) {
  const ops::WeightFormat* format = ops::weight_format(name);
  if (format == nullptr || format->grid != ops::WeightGrid::kGguf)
    fail("{} = '{}': known grids are {}", where, name,
         ops::weight_format_names(ops::WeightGrid::kGguf));
  return *format->gguf_type;
}

std::string gguf_grid_name(io::GgufType type) {
  if (const ops::WeightFormat* format = ops::gguf_weight_format(type))
    return std::string(format->name);
  return fmt::format("gguf-{}", enum_name(type));  // no grid: named for the error that follows
}

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

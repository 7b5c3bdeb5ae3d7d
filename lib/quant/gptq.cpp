// See gptq.h. Layout of the work: W (rows, cols) float32 row-major, processed in the column order
// `order` (the act-order permutation or the identity). Inside a block of columns every row is
// independent (its group parameters, its codes and its error updates depend on that row only),
// so the column-by-column part runs as plain loops over one row at a time, in parallel over rows,
// with the row's block slice in L1 instead of one rank-1 tensor update per column over the whole
// block. The updates of the later blocks are one matrix product per block (the "lazy batch").
#include "quant/gptq.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "io/error.h"
#include "quant/fp_grid_weight.h"
#include "quant/gguf/grid_blocks.h"
#include "quant/uniform_quantizer.h"

namespace rqat::quant {

namespace {

void check_arguments(const at::Tensor& weight, const at::Tensor& hessian, const QuantSpec& spec,
                     const GptqOptions& options) {
  spec.validate("quant");
  if (weight.dim() != 2 || !c10::isFloatingType(weight.scalar_type()))
    fail("gptq: the weight must be a 2-D float tensor (out, in), got {} dims of {}", weight.dim(),
         c10::toString(weight.scalar_type()));
  const int64_t in = weight.size(1);
  if (hessian.dim() != 2 || hessian.size(0) != in || hessian.size(1) != in ||
      !c10::isFloatingType(hessian.scalar_type()))
    fail("gptq: the Hessian must be a float ({0}, {0}) tensor for a weight with {0} inputs", in);
  if (!(options.damp_percent >= 0) || !std::isfinite(options.damp_percent))
    fail("gptq: damp_percent = {} (must be a finite number >= 0)", options.damp_percent);
  if (options.block_size < 1) fail("gptq: block_size = {} (must be >= 1)", options.block_size);
  if (options.max_damp_retries < 0)
    fail("gptq: max_damp_retries = {} (must be >= 0)", options.max_damp_retries);
}

// Upper Cholesky factor U of (H + damp I)^-1 (U^T U = H^-1), raising damp until both
// factorizations succeed. Overwrites H's diagonal.
at::Tensor inverse_cholesky_upper(at::Tensor& h, const GptqOptions& options, GptqReport& report) {
  auto diag = h.diagonal();
  const auto undamped = diag.clone();
  const float mean = undamped.mean().item<float>();
  if (!(mean > 0))
    fail("gptq: the Hessian's mean diagonal is {} (a Hessian 2 X X^T / n has a positive one)",
         mean);
  double fraction = options.damp_percent;
  for (int attempt = 0;; ++attempt) {
    // A float32 product, as torch computes percdamp * mean(diag H): the reference's damping.
    const float damp = static_cast<float>(fraction) * mean;
    diag.copy_(undamped + damp);
    auto [lower, info] = at::linalg_cholesky_ex(h, /*upper=*/false, /*check_errors=*/false);
    if (info.item<int>() == 0) {
      at::Tensor inverse = at::cholesky_inverse(lower);
      lower = at::Tensor();  // peak memory: H, H^-1 and U, each in^2 floats
      auto [upper, info_inv] =
          at::linalg_cholesky_ex(inverse, /*upper=*/true, /*check_errors=*/false);
      if (info_inv.item<int>() == 0 && at::isfinite(upper).all().item<bool>()) {
        report.damp_used = fraction;
        report.damp_value = damp;
        report.damp_increases = attempt;
        return upper.contiguous();
      }
    }
    if (attempt >= options.max_damp_retries)
      fail(
          "gptq: the Hessian is not positive definite even with damping {} x mean(diag H) after {} "
          "increases (too few calibration samples, or non-finite activations?)",
          fraction, attempt);
    fraction = fraction > 0 ? fraction * kDampRetryFactor : kDampRetryStart;
  }
}

// Own float32 CPU copy of H, which gptq modifies in place. H is the caller's own tensor when
// nobody else holds it (passed with std::move or as a temporary): then its memory is reused.
at::Tensor working_hessian(at::Tensor h) {
  const bool reusable = h.use_count() == 1 && h.storage().use_count() == 1 && h.is_cpu() &&
                        h.scalar_type() == at::kFloat && h.is_contiguous() && !h.requires_grad() &&
                        (!h.is_inference() || c10::InferenceMode::is_enabled());
  if (!reusable) h = h.to(at::kCPU, at::kFloat, false, /*copy=*/true).contiguous();
  return h;
}

// Dead columns: no input ever reached them, so their weights do not matter; zero them and give
// H a unit diagonal there so that it stays invertible. Returns how many there are.
int64_t zero_dead_columns(at::Tensor& w_tensor, at::Tensor& h) {
  auto dead = h.diagonal() == 0;
  const int64_t count = dead.sum().item<int64_t>();
  if (count > 0) {
    h.diagonal().masked_fill_(dead, 1.0);
    w_tensor.masked_fill_(dead.unsqueeze(0), 0.0);
  }
  return count;
}

// static_groups: every group's (scale, zero) from the original columns, before any update.
void find_static_groups(const at::Tensor& w_tensor, const QuantSpec& spec, int64_t group,
                        at::Tensor& scales, at::Tensor& zeros) {
  const int64_t cols = w_tensor.size(1), groups = scales.size(1);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * group, width = std::min(group, cols - begin);
    RowParams p = find_row_params(w_tensor.narrow(1, begin, width), spec);
    scales.select(1, g).copy_(p.scales);
    zeros.select(1, g).copy_(p.zeros);
  }
}

// Processing order, applied to W's columns and H's rows and columns when act_order. A stable sort
// keeps equal diagonals (e.g. dead columns) in column order.
at::Tensor processing_order(at::Tensor& w_tensor, at::Tensor& h, bool act_order) {
  if (!act_order) return at::arange(w_tensor.size(1), at::kLong);
  at::Tensor order = at::argsort(h.diagonal(), /*stable=*/true, /*dim=*/0, /*descending=*/true);
  w_tensor = w_tensor.index_select(1, order).contiguous();
  h = h.index_select(0, order).index_select(1, order).contiguous();
  return order;
}

// Group of the column processed j-th: static groups keep the original columns' groups; dynamic
// groups are consecutive runs of the processing order.
std::vector<int64_t> processing_groups(const at::Tensor& order, int64_t group, bool static_groups) {
  const int64_t cols = order.size(0);
  const int64_t* order_ptr = order.data_ptr<int64_t>();
  std::vector<int64_t> group_of(cols);
  for (int64_t j = 0; j < cols; ++j) group_of[j] = (static_groups ? order_ptr[j] : j) / group;
  return group_of;
}

// The column loop over W in processing order, block after block. W, scales and zeros are the
// caller's tensors (shared storage), updated in place; codes, output and row_loss are the results.
struct ColumnLoop {
  at::Tensor w_tensor;  // (rows, cols) float32, updated in place
  at::Tensor u;         // (cols, cols) upper Cholesky factor of H^-1
  at::Tensor scales;    // (rows, groups)
  at::Tensor zeros;     // (rows, groups)
  const std::vector<int64_t>& group_of;
  const QuantSpec& spec;
  bool static_groups;
  bool lazy_group_params;  // GptqGroupParams::kLazy
  bool min_form;           // a GGUF grid with mins: zeros hold them (quant/gguf/grid.h)
  // A floating-point grid: scales are the blocks' effective scales, codes the elements' bits.
  std::optional<FpGrid> fp_grid;
  int64_t group;
  int64_t block;
  at::Tensor codes;        // (rows, cols) uint8
  at::Tensor err;          // (rows, block) scaled errors (w - q) / U_jj of a block
  at::Tensor block_start;  // lazy group parameters: the block's columns as the block began
  at::Tensor output;       // (rows, cols) float32 Q when asked for, else undefined
  std::vector<double> row_loss;

  // (scale, zero) of the group starting at processing position j of block [i1, i2), from the
  // group's current weights. Updated: columns inside the block are already updated in place;
  // later ones still lack the lazy update of this block's columns before j, applied here to a
  // copy. Lazy (the reference): the block's columns as they were when the block began, and the
  // later ones as they are, both without this block's updates.
  void find_dynamic_group(int64_t j, int64_t i1, int64_t i2) {
    const int64_t cols = w_tensor.size(1);
    const int64_t width = std::min(group, cols - j);
    const int64_t inside = std::min(width, i2 - j);
    at::Tensor current =
        lazy_group_params ? block_start.narrow(1, j - i1, inside) : w_tensor.narrow(1, j, inside);
    if (width > inside) {
      at::Tensor later = w_tensor.narrow(1, i2, width - inside);
      if (j > i1 && !lazy_group_params)
        later = at::addmm(later, err.narrow(1, 0, j - i1),
                          u.narrow(0, i1, j - i1).narrow(1, i2, width - inside), 1, -1);
      current = at::cat({current, later}, 1);
    }
    RowParams p = find_row_params(current, spec);
    scales.select(1, group_of[j]).copy_(p.scales);
    zeros.select(1, group_of[j]).copy_(p.zeros);
  }

  // Columns [a, b) of block [i1, i2): quantize column by column and spread each column's error
  // over the rest of the block (the paper's inner loop), one row at a time. Plain pointers and
  // local copies: rows run in parallel and the inner loop should not reach through `this`.
  void quantize_columns(int64_t a, int64_t b, int64_t i1, int64_t i2) {
    const int64_t rows = w_tensor.size(0), cols = w_tensor.size(1), groups = scales.size(1);
    const int64_t err_stride = block;
    float* w = w_tensor.data_ptr<float>();
    const float* u_ptr = u.data_ptr<float>();
    uint8_t* code_ptr = codes.data_ptr<uint8_t>();
    float* err_ptr = err.data_ptr<float>();
    float* out_ptr = output.defined() ? output.data_ptr<float>() : nullptr;
    const float* scale_ptr = scales.data_ptr<float>();
    const float* zero_ptr = zeros.data_ptr<float>();
    const int64_t* group_ptr = group_of.data();
    double* loss_ptr = row_loss.data();
    const float max_code = static_cast<float>(spec.max_code());
    const bool mins = min_form;
    const std::optional<FpGrid> fp = fp_grid;
    const int64_t grain = std::max<int64_t>(1, 4096 / ((b - a) * (i2 - a)));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* wr = w + r * cols;
        float* er = err_ptr + r * err_stride;
        double loss = 0;
        for (int64_t j = a; j < b; ++j) {
          const int64_t g = r * groups + group_ptr[j];
          const float scale = scale_ptr[g], zero = zero_ptr[g];
          const float x = wr[j];
          float q, dq;  // the code and its value, as QuantizedWeight::dequantize computes it
          if (fp) {
            const float v = scale > 0 ? fp_round(x / scale, *fp) : 0.0f;
            q = fp_code(v, *fp);
            dq = v * scale;
          } else {
            q = grid_code(x, scale, zero, max_code, mins);
            dq = grid_value(q, scale, zero, mins);
          }
          const float d = u_ptr[j * cols + j];
          const float e = (x - dq) / d;
          code_ptr[r * cols + j] = static_cast<uint8_t>(q);
          if (out_ptr != nullptr) out_ptr[r * cols + j] = dq;
          er[j - i1] = e;
          loss += 0.5 * static_cast<double>(x - dq) * (x - dq) / (static_cast<double>(d) * d);
          const float* ur = u_ptr + j * cols;
          for (int64_t c = j + 1; c < i2; ++c) wr[c] -= e * ur[c];
        }
        loss_ptr[r] += loss;
      }
    });
  }

  // Blocks of `block` columns; inside a block, runs of columns that share their group parameters
  // (dynamic groups are found at their first column); then the block's lazy batch update.
  void run() {
    const int64_t cols = w_tensor.size(1);
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
      const int64_t i2 = std::min(i1 + block, cols);
      if (lazy_group_params && !static_groups)
        block_start = w_tensor.narrow(1, i1, i2 - i1).clone();
      for (int64_t j = i1; j < i2;) {
        int64_t next = i2;
        if (!static_groups) {
          if (j % group == 0) find_dynamic_group(j, i1, i2);
          next = std::min(i2, (j / group + 1) * group);
        }
        quantize_columns(j, next, i1, i2);
        j = next;
      }
      if (i2 < cols) {
        // The lazy batch update: W[:, i2:] -= Err[:, :count] U[i1:i2, i2:].
        w_tensor.narrow(1, i2, cols - i2)
            .addmm_(err.narrow(1, 0, i2 - i1), u.narrow(0, i1, i2 - i1).narrow(1, i2, cols - i2), 1,
                    -1);
      }
    }
  }
};

// The result in the original column order: act_order permutes the codes (and Q) back and, with
// dynamic groups, gives each original column the group of its processing position.
QuantizedWeight original_order_result(const QuantSpec& spec, const GptqOptions& options,
                                      const at::Tensor& order, int64_t group,
                                      const at::Tensor& scales, const at::Tensor& zeros,
                                      const at::Tensor& codes, at::Tensor& output) {
  const int64_t cols = codes.size(1);
  QuantizedWeight result;
  result.bits = spec.bits;
  result.group_size = spec.group_size;
  result.scales = scales;
  result.zeros = zeros;
  if (options.act_order) {
    auto inverse = at::argsort(order);  // processing position of each original column
    result.codes = codes.index_select(1, inverse);
    if (options.return_output) output = output.index_select(1, inverse);
    result.g_idx = options.static_groups ? contiguous_group_index(cols, spec.group_size)
                                         : at::floor_divide(inverse, group).to(at::kInt);
  } else {
    result.codes = codes;
    result.g_idx = contiguous_group_index(cols, spec.group_size);
  }
  return result;
}

}  // namespace

QuantizedWeight gptq_quantize(const at::Tensor& weight, at::Tensor hessian, const QuantSpec& spec,
                              const GptqOptions& requested, GptqReport* report_out,
                              const at::Tensor& grid_importance,
                              std::optional<float> nvfp4_global) {
  const auto start = std::chrono::steady_clock::now();
  check_arguments(weight, hessian, spec, requested);
  if (grid_importance.defined() && !spec.gguf_grid)
    fail("gptq: an importance matrix needs a GGUF grid");
  // A GGUF grid is static: every sub-block's scale (and min) is llama.cpp's reference choice for
  // the original weights; GPTQ chooses the codes on it, in any order (the groups stay contiguous).
  GptqOptions options = requested;
  // A floating-point grid likewise, on the format's reference scales.
  if (spec.gguf_grid || spec.fp_grid) options.static_groups = true;
  // A model's weight usually requires grad: without this guard every in-place update below would
  // be recorded for autograd.
  at::NoGradGuard no_grad;
  GptqReport report;
  // Own float32 CPU copy: W is modified in place.
  at::Tensor w_tensor = weight.to(at::kCPU, at::kFloat, false, /*copy=*/true).contiguous();
  at::Tensor h = working_hessian(std::move(hessian));
  if (!at::isfinite(w_tensor).all().item<bool>())
    fail("gptq: the weight holds NaN or infinite values");
  if (!at::isfinite(h).all().item<bool>())
    fail("gptq: the Hessian holds NaN or infinite values (non-finite calibration activations?)");
  const int64_t rows = w_tensor.size(0), cols = w_tensor.size(1);
  const int64_t group = spec.effective_group_size(cols), groups = spec.num_groups(cols);
  auto scales = at::zeros({rows, groups}, at::kFloat),
       zeros = at::zeros({rows, groups}, at::kFloat);
  // The reference takes a per-channel range once, from the original weights with their dead
  // columns: one static group, found before the dead columns are zeroed.
  const bool lazy = options.group_params == GptqGroupParams::kLazy;
  const bool lazy_per_channel = lazy && group == cols && !spec.gguf_grid && !spec.fp_grid;
  const bool static_groups = options.static_groups || lazy_per_channel;
  if (lazy_per_channel) find_static_groups(w_tensor, spec, group, scales, zeros);
  report.dead_columns = zero_dead_columns(w_tensor, h);
  QuantizedWeight grid;
  if (spec.gguf_grid) {
    grid = gguf_grid_quantize(*spec.gguf_grid, w_tensor, grid_importance);
    scales = grid.scales;
    zeros = grid.zeros;
  } else if (spec.fp_grid) {
    grid = fp_grid_quantize(w_tensor, *spec.fp_grid, "gptq", nvfp4_global);
    scales = fp_effective_scales(grid);  // what each block's values are multiplied by
    zeros = grid.zeros;
  } else if (options.static_groups && !lazy_per_channel) {
    find_static_groups(w_tensor, spec, group, scales, zeros);
  }

  const at::Tensor order = processing_order(w_tensor, h, options.act_order);
  const std::vector<int64_t> group_of = processing_groups(order, group, static_groups);

  at::Tensor u = inverse_cholesky_upper(h, options, report);
  h = at::Tensor();

  const int64_t block = std::min(options.block_size, cols);
  ColumnLoop loop{
      .w_tensor = w_tensor,
      .u = u,
      .scales = scales,
      .zeros = zeros,
      .group_of = group_of,
      .spec = spec,
      .static_groups = static_groups,
      .lazy_group_params = lazy,
      .min_form = spec.gguf_grid && gguf_grid_info(*spec.gguf_grid).min_form,
      .fp_grid = spec.fp_grid,
      .group = group,
      .block = block,
      .codes = at::empty({rows, cols}, at::kByte),
      .err = at::zeros({rows, block}, at::kFloat),
      .block_start = at::Tensor(),
      .output = options.return_output ? at::empty({rows, cols}, at::kFloat) : at::Tensor(),
      .row_loss = std::vector<double>(rows, 0.0),
  };
  loop.run();

  at::Tensor output = loop.output;
  QuantizedWeight result =
      original_order_result(spec, options, order, group, scales, zeros, loop.codes, output);
  result.gguf_grid = grid.gguf_grid;
  result.fp_grid = grid.fp_grid;
  result.super_scales = grid.super_scales;
  if (spec.fp_grid) result.scales = grid.scales;  // the stored scales, not the effective ones
  for (double l : loop.row_loss) report.loss += l;
  report.output = output;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (report_out != nullptr) *report_out = std::move(report);
  return result;
}

}  // namespace rqat::quant

// See quant_config.h.
#include "cli/quant_config.h"

namespace rqat::cli {

quant::QuantSpec PtqQuantConfig::resolve() const {
  quant::QuantSpec out = spec;
  if (!grid.empty()) out.use_grid(grid, "--grid");
  return out;
}

quant::QuantSpec TrainQuantConfig::resolve_spec() const {
  quant::QuantSpec out = PtqQuantConfig{spec, grid}.resolve();
  // As given: 0 until plan_quantization takes the grid's or the state's (a preset's are its own).
  if (out.grid_name()) out.bits = spec.bits;
  return out;
}

}  // namespace rqat::cli

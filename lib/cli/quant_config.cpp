// See quant_config.h.
#include "cli/quant_config.h"

#include "quant/gguf/grid.h"

namespace rqat::cli {

quant::QuantSpec PtqQuantConfig::resolve() const {
  quant::QuantSpec out = spec;
  if (!grid.empty()) out.use_gguf_grid(quant::parse_gguf_grid(grid, "--grid"));
  return out;
}

quant::QuantSpec TrainQuantConfig::resolve_spec() const {
  quant::QuantSpec out = PtqQuantConfig{spec, grid}.resolve();
  out.bits = spec.bits;  // as given: 0 until plan_quantization takes the grid's or the state's
  return out;
}

}  // namespace rqat::cli

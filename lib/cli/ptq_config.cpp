// See ptq_config.h.
#include "cli/ptq_config.h"

namespace rqat::cli {

tools::PtqCommandOptions PtqConfig::resolve() const {
  tools::PtqCommandOptions o;
  o.model_dir = model;
  o.out_dir = out;
  o.ptq = ptq;
  o.ptq.spec = quant.resolve();
  if (!calib.empty()) {
    o.calibration = calibration;
    o.calibration->data.path = calib;
  }
  o.export_format = export_format;
  o.gguf_type = gguf_type;
  o.gguf_embedding_type = gguf_embedding_type;
  runtime.apply();
  o.device = runtime.resolved_device();
  o.dtype = o.device.is_cuda() ? runtime.resolved_dtype() : at::kFloat;
  o.record = io::OptionsRecord::of(*this);
  return o;
}

}  // namespace rqat::cli

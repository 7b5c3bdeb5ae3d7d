#include "quant/load_model.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "quant/gptq_checkpoint.h"

namespace rqat::quant {

std::shared_ptr<model::CausalLM> load_model(const std::filesystem::path& dir,
                                            const model::LoadOptions& options) {
  auto model = model::build_causal_lm(dir, options);
  // GPTQ checkpoints: the packed layers are built from their own tensors first.
  if (auto gptq = read_gptq_config(model->config().raw, (dir / "config.json").string())) {
    attach_packed_gptq_layers(*model, dir, *gptq, options.dequantize);
#if defined(__GLIBC__)
    // Repacking made per-layer temporaries (unpacked codes) of a few MB each, which glibc keeps in
    // its heap once its mmap threshold has grown: hand them back, so a packed model costs its
    // packed size.
    malloc_trim(0);
#endif
  }
  model::load_weights(*model, dir);
  return model;
}

}  // namespace rqat::quant

#include "quant/load_model.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "quant/activation_quant.h"
#include "quant/gptq_checkpoint.h"
#include "quant/quant_state.h"

namespace rqat::quant {

std::shared_ptr<model::CausalLM> load_model(const std::filesystem::path& dir,
                                            const model::LoadOptions& options) {
  return load_model(io::Artifact::open(dir), options);
}

std::shared_ptr<model::CausalLM> load_model(const io::Artifact& artifact,
                                            const model::LoadOptions& options,
                                            InputQuantization inputs) {
  const std::filesystem::path& dir = artifact.dir;
  auto model = model::build_causal_lm(artifact, options);
  // GPTQ checkpoints: the packed layers are built from their own tensors first.
  if (auto gptq = read_gptq_config(model->config().raw, artifact.where(io::kConfigFile))) {
    attach_packed_gptq_layers(*model, dir, *gptq, options.dequantize);
#if defined(__GLIBC__)
    // Repacking made per-layer temporaries (unpacked codes) of a few MB each, which glibc keeps in
    // its heap once its mmap threshold has grown: hand them back, so a packed model costs its
    // packed size.
    malloc_trim(0);
#endif
  }
  model::load_weights(*model, dir);
  // An artifact made with --act-grid computes with quantized inputs, as it will be served.
  if (inputs == InputQuantization::kOff) return model;
  if (const auto spec = read_quant_spec(dir); spec && spec->activations)
    attach_activation_quant(*model, *spec, read_input_global_scales(dir));
  return model;
}

}  // namespace rqat::quant

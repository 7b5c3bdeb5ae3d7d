// See init.h. Values are drawn on the CPU from one seeded generator in parameter order, then moved,
// so the same seed gives the same model on the CPU and on a GPU.
#include "model/init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace rqat::model {

void init_random(CausalLM& model, uint64_t seed, double std) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    at::Tensor& param = item.value();
    at::Tensor value = at::empty(param.sizes(), at::kFloat);
    if (name.ends_with("norm.weight")) {
      value.fill_(1.0);
    } else if (name.ends_with(".bias")) {
      value.zero_();
    } else {
      value.normal_(0.0, std, generator);
    }
    param.set_data(value.to(param.device(), param.scalar_type()));
  }
}

}  // namespace rqat::model

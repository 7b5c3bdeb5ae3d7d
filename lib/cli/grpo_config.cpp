// See grpo_config.h.
#include "cli/grpo_config.h"

namespace rqat::cli {

tools::GrpoCommandOptions GrpoConfig::resolve() const {
  tools::GrpoCommandOptions o = options;
  o.model_dir = model;
  o.out_dir = out;
  o.data = data;
  o.fields.name = "prompts";
  o.fields.problem_fields = {problem_field};
  o.fields.answer_field = answer_field;
  o.fields.gsm8k_gold = gsm8k_answers;
  o.fields.id_field = id_field;
  o.prompt.use_chat_template = !no_chat_template;
  o.prompt.enable_thinking = !disable_thinking;
  o.spec = quant.resolve_spec();
  o.init = quant.init;
  o.fake_quant = quant.fake_quant;
  runtime.apply();
  o.device = runtime.resolved_device();
  o.dtype = runtime.resolved_dtype();
  o.dequantize = runtime.dequantize;
  o.record = io::OptionsRecord::of(*this);
  return o;
}

}  // namespace rqat::cli

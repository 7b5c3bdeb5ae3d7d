// See rqat_generate_config.h.
#include "cli/rqat_generate_config.h"

#include "cli/rqat_flag_checks.h"

namespace rqat::cli {

tools::GenerateCommandOptions GenerateConfig::resolve() const {
  tools::GenerateCommandOptions o = generate;
  require_existing_directory("--model", o.model_dir);
  if (!o.chat_template_file.empty()) require_existing_file("--chat-template", o.chat_template_file);
  require_at_least("--num-samples", o.n, 1);
  require_at_least("--max-new-tokens", o.max_new_tokens, int64_t{0});
  require_at_least("--temperature", o.temperature, 0.0);
  require_at_least("--top-k", o.top_k, int64_t{0});
  require_within("--top-p", o.top_p, 0.0, 1.0);
  require_within("--min-p", o.min_p, 0.0, 1.0);
  runtime.apply();
  o.dtype = runtime.resolved_dtype();
  o.dequantize = runtime.dequantize;
  o.device = runtime.resolved_device();
  return o;
}

void GenerateConfig::run(std::ostream& out) const { tools::run_generate_command(resolve(), out); }

}  // namespace rqat::cli

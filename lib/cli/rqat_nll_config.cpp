// See rqat_nll_config.h.
#include "cli/rqat_nll_config.h"

#include "cli/rqat_flag_checks.h"

namespace rqat::cli {

tools::NllCommandOptions NllConfig::resolve() const {
  require_existing_directory("--model", nll.model_dir);
  require_existing_file("--data", data);
  if (!nll.chat_template_file.empty())
    require_existing_file("--chat-template", nll.chat_template_file);
  require_within("--seq-len", nll.seq_len, int64_t{2}, int64_t{1} << 40);
  require_at_least("--max-tokens", max_tokens, int64_t{0});
  require_at_least("--max-documents", max_documents, int64_t{0});
  require_at_least("--batch-size", nll.batch_size, int64_t{1});
  tools::NllCommandOptions o = nll;
  o.data.path = data;
  o.data.add_special_tokens = !no_special_tokens;
  o.data.enable_thinking = !no_thinking;
  if (!o.chat_template_file.empty() || !o.data.system_prompt.empty() || no_thinking)
    o.data.use_chat_template = true;  // any chat option implies the chat template
  if (max_tokens > 0) o.max_tokens = max_tokens;
  if (max_documents > 0) o.data.max_documents = static_cast<size_t>(max_documents);
  if (!json.empty()) o.json_out = json;
  runtime.apply();
  o.dtype = runtime.resolved_dtype();
  o.dequantize = runtime.dequantize;
  o.device = runtime.resolved_device();
  return o;
}

void NllConfig::run(std::ostream& out) const { tools::run_nll_command(resolve(), out); }

}  // namespace rqat::cli

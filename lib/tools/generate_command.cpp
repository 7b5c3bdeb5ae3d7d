// See generate_command.h.
#include "tools/generate_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ostream>

#include "chat/chat_template.h"
#include "io/error.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "tokenizer/tokenizer.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::generation;

std::vector<GenerationResult> run_generate_command(const GenerateCommandOptions& options,
                                                   std::ostream& out) {
  if (options.n < 1) fail("--n must be >= 1, got {}", options.n);
  if (options.prompt.empty()) fail("--prompt is empty");
  const io::Artifact artifact = io::Artifact::open(options.model_dir);  // read once
  auto model = quant::load_model(
      artifact, model::LoadOptions{options.dtype, options.device, options.dequantize});
  auto tokenizer = tokenizer::Tokenizer::load(artifact);

  GenerationRequest request;
  std::string prompt = options.prompt;
  bool add_special_tokens = true;
  // Any chat option implies the chat template.
  if (options.use_chat_template || !options.system_prompt.empty() ||
      !options.chat_template_file.empty() || options.disable_thinking) {
    std::optional<std::filesystem::path> override_file;
    if (!options.chat_template_file.empty()) override_file = options.chat_template_file;
    const auto chat = chat::ChatTemplate::load(artifact, override_file);
    std::vector<chat::Message> messages;
    if (!options.system_prompt.empty()) messages.push_back({"system", options.system_prompt});
    messages.push_back({"user", options.prompt});
    prompt = chat.render(messages, {/*add_generation_prompt=*/true, !options.disable_thinking});
    add_special_tokens = false;  // the template writes BOS itself where the family has one
  }
  for (const auto id : tokenizer->encode(prompt, add_special_tokens))
    request.prompt_ids.push_back(id);
  if (request.prompt_ids.empty()) fail("--prompt encodes to no tokens");
  request.num_samples = options.n;
  request.seed = options.seed;
  request.params.temperature = options.temperature;
  request.params.top_k = options.top_k;
  request.params.top_p = options.top_p;
  request.params.min_p = options.min_p;
  request.params.max_new_tokens = options.max_new_tokens;
  request.params.stop_strings = options.stop_strings;
  if (!options.ignore_eos) request.params.stop_token_ids = model_stop_token_ids(model->config());

  EngineOptions engine_options = options.engine;
  engine_options.show_progress = options.show_progress;
  GenerationEngine engine(*model, tokenizer, engine_options);
  auto results = engine.generate({request});

  for (const auto& r : results) {
    out << fmt::format("--- sample {} ({} tokens, {}, {:.2f} s)\n", r.sample_index,
                       r.token_ids.size(), enum_name(r.finish_reason), r.seconds);
    out << r.text << "\n";
  }
  const auto& stats = engine.stats();
  std::string reasons;
  for (const auto reason :
       {FinishReason::kStopToken, FinishReason::kStopString, FinishReason::kLength}) {
    const auto count = std::count_if(results.begin(), results.end(),
                                     [&](const auto& r) { return r.finish_reason == reason; });
    if (count > 0)
      reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", count, enum_name(reason));
  }
  out << fmt::format(
      "generated {} tokens in {} samples ({}) from a {}-token prompt in {:.2f} s: {:.1f} "
      "tokens/s\n",
      stats.generated_tokens, results.size(), reasons, request.prompt_ids.size(), stats.seconds,
      stats.seconds > 0 ? static_cast<double>(stats.generated_tokens) / stats.seconds : 0.0);
  return results;
}

}  // namespace rqat::tools

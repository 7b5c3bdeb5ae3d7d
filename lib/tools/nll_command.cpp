// See nll_command.h.
#include "tools/nll_command.h"

#include <fmt/format.h>

#include <chrono>
#include <ostream>

#include "chat/chat_template.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "tokenizer/tokenizer.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::train;
using namespace rqat::data;

namespace {

void validate(const NllCommandOptions& options, const model::ModelConfig& config) {
  if (options.seq_len < 2) fail("--seq-len must be >= 2, got {}", options.seq_len);
  if (options.seq_len > config.max_position_embeddings)
    fail("--seq-len {} exceeds the model's max_position_embeddings {} ({})", options.seq_len,
         config.max_position_embeddings, (options.model_dir / "config.json").string());
  if (options.batch_size < 1) fail("--batch-size must be >= 1, got {}", options.batch_size);
  if (options.max_tokens && *options.max_tokens < 1)
    fail("--max-tokens must be >= 1, got {}", *options.max_tokens);
}

io::Json report_json(const NllCommandOptions& options, const TokenizedDataset& data,
                     const NllReport& report) {
  io::Json j = io::Json::object();
  j["model"] = options.model_dir.string();
  j["data"] = options.data.path.string();
  j["format"] = enum_name(data.format);
  if (options.data.use_chat_template) {
    j["chat_template"] = data.chat_format;
    j["fields"] = {{"prompt", options.data.prompt_field},
                   {"response", options.data.response_field}};
  } else if (data.format == DataFormat::kJsonl) {
    j["fields"] = {{"text", options.data.text_field}};
  }
  j["seq_len"] = options.seq_len;
  j["max_tokens"] = options.max_tokens ? io::Json(*options.max_tokens) : io::Json(nullptr);
  j["documents"] = report.documents;
  j["windows"] = report.windows;
  j["tokens"] = report.totals.tokens;
  j["sum_nll"] = report.totals.sum_nll;
  j["mean_nll"] = report.totals.mean();
  j["perplexity"] = report.totals.perplexity();
  j["seconds"] = report.seconds;
  return j;
}

}  // namespace

NllReport run_nll_command(const NllCommandOptions& options, std::ostream& out) {
  const auto started = std::chrono::steady_clock::now();
  // Everything that can be wrong with the flags or the data is found before the weights load.
  const io::Artifact artifact = io::Artifact::open(options.model_dir);  // read once
  const auto config = model::ModelConfig::from_artifact(artifact);
  validate(options, config);
  auto tokenizer = tokenizer::Tokenizer::load(artifact);
  std::optional<chat::ChatTemplate> chat;
  if (options.data.use_chat_template) {
    std::optional<std::filesystem::path> override_file;
    if (!options.chat_template_file.empty()) override_file = options.chat_template_file;
    chat = chat::ChatTemplate::load(artifact, override_file);
  }
  const TokenizedDataset data =
      load_tokenized_dataset(options.data, *tokenizer, chat ? &*chat : nullptr);
  const auto windows = score_windows(data, options.seq_len, options.max_tokens);
  if (windows.empty())
    fail("{}: no tokens to score ({} documents, {} target tokens)", options.data.path.string(),
         data.documents.size(), data.target_tokens);

  auto model = quant::load_model(
      artifact, model::LoadOptions{options.dtype, options.device, options.dequantize});
  model->eval();
  NllReport report;
  report.documents = static_cast<int64_t>(data.documents.size());
  report.windows = static_cast<int64_t>(windows.size());
  report.totals = token_nll(*model, windows, options.batch_size);
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  out << fmt::format("model {}  data {} ({} documents, {} windows of <= {} tokens)\n",
                     options.model_dir.string(), options.data.path.string(), report.documents,
                     report.windows, options.seq_len);
  out << fmt::format("{:>12}  {:>10}  {:>12}\n", "tokens", "mean NLL", "perplexity");
  out << fmt::format("{:>12}  {:>10.6f}  {:>12.4f}\n", report.totals.tokens, report.totals.mean(),
                     report.totals.perplexity());
  if (options.json_out) {
    io::write_json_file(*options.json_out, report_json(options, data, report));
    out << "wrote " << options.json_out->string() << "\n";
  }
  return report;
}

}  // namespace rqat::tools

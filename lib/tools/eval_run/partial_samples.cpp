#include "tools/eval_run/partial_samples.h"

#include <fmt/format.h>

#include <ostream>

#include "io/atomic_file.h"
#include "io/error.h"
#include "io/json_text.h"
#include "io/options.h"

namespace rqat::eval {

namespace {

std::string get_text(const io::Json& row) {
  if (row.contains("text")) return row.at("text").get<std::string>();
  const auto hex = row.at("text_hex").get<std::string>();
  std::string text;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    text += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return text;
}

// One line of the file. Completions are decoded token bytes and need not be valid UTF-8 (a sample
// cut inside a character), which JSON strings must be: such a text is kept as hex, so it comes
// back byte for byte.
std::string result_line(const std::string& problem_id, const generation::GenerationResult& r) {
  io::Json row;
  row["id"] = problem_id;
  row["sample"] = r.sample_index;
  row["token_ids"] = r.token_ids;
  row["text"] = r.text;
  row["finish_reason"] = enum_name(r.finish_reason);
  row["seconds"] = r.seconds;
  try {
    return row.dump();
  } catch (const nlohmann::json::type_error&) {  // invalid UTF-8
    std::string hex;
    for (const unsigned char c : r.text) hex += fmt::format("{:02x}", c);
    row.erase("text");
    row["text_hex"] = hex;
    return row.dump();
  }
}

generation::GenerationResult result_of_row(const io::Json& row) {
  generation::GenerationResult r;
  r.sample_index = row.at("sample").get<int>();
  r.token_ids = row.at("token_ids").get<std::vector<int32_t>>();
  r.text = get_text(row);
  r.finish_reason = parse_enum<generation::FinishReason>(row.at("finish_reason").get<std::string>(),
                                                         "finish_reason");
  r.seconds = row.at("seconds").get<double>();
  return r;
}

}  // namespace

SampleCheck sample_matches_model(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                                 int64_t vocab_size) {
  return [tokenizer = std::move(tokenizer), vocab_size](const generation::GenerationResult& r) {
    for (const int32_t id : r.token_ids)
      if (id < 0 || id >= vocab_size) return false;
    try {
      return generation::completion_text(*tokenizer, r.token_ids, r.finish_reason, {}) == r.text;
    } catch (const std::exception&) {  // ids the tokenizer cannot decode
      return false;
    }
  };
}

PartialSamples::PartialSamples(std::filesystem::path file, io::Json fingerprint, std::ostream& log,
                               const SampleCheck& check)
    : file_(std::move(file)) {
  std::vector<std::string> lines;  // the valid sample lines, written back below
  size_t dropped = 0;
  if (std::ifstream in{file_}; in) {
    std::string line;
    bool header_read = false, same_settings = false;
    while (std::getline(in, line)) {
      io::Json row;
      // A line that does not parse can only be the last one, torn by a kill: the rest is kept.
      if (io::parse_json_into(line, row) || !row.is_object()) break;
      if (!header_read) {
        header_read = true;
        const io::Json saved = row.value("fingerprint", io::Json());
        same_settings = saved == io::comparable_fingerprint(fingerprint, saved);
        if (!same_settings) {
          log << fmt::format("{}: made with other settings; generating every sample again\n",
                             file_.string());
          break;
        }
        continue;
      }
      try {
        auto result = result_of_row(row);
        if (check && !check(result)) {
          ++dropped;
          continue;
        }
        kept_[{row.at("id").get<std::string>(), result.sample_index}] = std::move(result);
        lines.push_back(line);
      } catch (const std::exception&) {
        break;
      }
    }
  }
  // Start the file again from what is valid, so appends never follow a torn line.
  io::write_file_atomically(file_, [&](std::ostream& out) {
    out << io::Json{{"fingerprint", fingerprint}}.dump() << '\n';
    for (const auto& line : lines) out << line << '\n';
  });
  out_.open(file_, std::ios::app | std::ios::binary);
  if (!out_) fail("{}: cannot open for appending", file_.string());
  if (dropped > 0)
    log << fmt::format(
        "warning: {}: {} kept samples do not match this model (token ids outside its vocabulary, "
        "or text that is not the decoding of the ids); generating them again\n",
        file_.string(), dropped);
  if (!kept_.empty())
    log << fmt::format("resuming: {} finished samples kept from {}\n", kept_.size(),
                       file_.string());
}

const generation::GenerationResult* PartialSamples::find(const std::string& problem_id,
                                                         int sample) const {
  const auto it = kept_.find({problem_id, sample});
  return it == kept_.end() ? nullptr : &it->second;
}

void PartialSamples::append(const std::string& problem_id,
                            const generation::GenerationResult& result) {
  out_ << result_line(problem_id, result) << '\n';
  out_.flush();
  if (!out_) fail("{}: cannot append a sample", file_.string());
}

void PartialSamples::remove() {
  out_.close();
  std::filesystem::remove(file_);
}

}  // namespace rqat::eval

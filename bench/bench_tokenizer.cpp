// Encoding throughput of rqat's tokenizer on one thread: every text of a JSON-lines file (one JSON
// string per line) is encoded once to warm the word cache (Hugging Face's BPE keeps one too), then
// --rounds more times, timed. scripts/bench_tokenizer runs it next to Hugging Face `tokenizers`.
// Usage: bench_tokenizer --tokenizer DIR --texts FILE [--rounds N]
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/error.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app("rqat tokenizer throughput (one thread)");
  std::string dir, texts_path;
  int rounds = 3;
  app.add_option("--tokenizer", dir, "tokenizer directory")->required();
  app.add_option("--texts", texts_path, "JSON lines, one string each")->required();
  app.add_option("--rounds", rounds, "timed passes over the texts")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto load_start = std::chrono::steady_clock::now();
    const auto tok = rqat::tokenizer::Tokenizer::load(dir);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    std::ifstream in(texts_path);
    if (!in) rqat::fail("{}: cannot open", texts_path);
    std::vector<std::string> texts;
    size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      texts.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += texts.back().size();
    }
    auto pass = [&] {
      size_t tokens = 0;
      for (const auto& t : texts) tokens += tok->encode(t).size();
      return tokens;
    };
    const auto cold_start = std::chrono::steady_clock::now();
    const size_t tokens = pass();
    const double cold_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - cold_start).count();
    const auto start = std::chrono::steady_clock::now();
    size_t total = 0;
    for (int r = 0; r < rounds; ++r) total += pass();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("rqat: load {:.2f} s; {} texts, {:.2f} MB, {} tokens per pass\n", load_s,
               texts.size(), bytes / 1e6, tokens);
    fmt::print("rqat encode, first pass (cold cache): {:.0f} tokens/s\n", tokens / cold_s);
    fmt::print("rqat encode, {} passes: {:.0f} tokens/s, {:.1f} MB/s\n", rounds, total / s,
               rounds * bytes / 1e6 / s);
    fmt::print("RESULT rqat_tokens_per_s {:.0f}\n", total / s);
  } catch (const rqat::Error& e) {
    fmt::print(stderr, "bench_tokenizer: {}\n", e.what());
    return 1;
  }
  return 0;
}

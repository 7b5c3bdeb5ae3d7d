// Benchmark of the eval-math grader: 10,000 completion/gold pairs built from MATH-500 (each
// solution as a completion, and perturbed variants: answer re-boxed with spaces, wrong by one, a
// \dfrac, a <think> block), graded single-threaded and with all cores; prints completions/s.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/grader.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  fs::path dir = argc > 1 ? fs::path(argv[1])
                 : std::getenv("RQAT_SHARED_DATA")
                     ? fs::path(std::getenv("RQAT_SHARED_DATA"))
                     : fs::path(__FILE__).parent_path() / ".." / ".." / "shared" / "data";
  std::ifstream in(dir / "math500" / "test.jsonl");
  if (!in) {
    std::cerr << "bench_grader: cannot read " << (dir / "math500" / "test.jsonl") << "\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    auto row = nlohmann::json::parse(line);
    rows.emplace_back(row.at("solution").get<std::string>(), row.at("answer").get<std::string>());
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; pairs.size() < 10000; ++i) {
    const auto& [solution, answer] = rows[i % rows.size()];
    switch ((i / rows.size()) % 5) {
      case 0:
        pairs.emplace_back(solution, answer);
        break;
      case 1:
        pairs.emplace_back("<think>scratch work \\boxed{0}</think> so \\boxed{ " + answer + " }.",
                           answer);
        break;
      case 2:
        pairs.emplace_back("The final answer is $" + answer + "+1$.", answer);
        break;
      case 3:
        pairs.emplace_back("Thus \\boxed{2\\cdot(" + answer + ")/2}", answer);
        break;
      default:
        pairs.emplace_back(solution + "\nWait, maybe \\boxed{\\dfrac{1}{7}}", answer);
        break;
    }
  }
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned threads : {1u, cores}) {
    auto start = std::chrono::steady_clock::now();
    auto results = rqat::eval::grade_batch(pairs, threads);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    size_t counts[4] = {0, 0, 0, 0};
    for (const auto& r : results) ++counts[static_cast<int>(r.kind)];
    std::cout << "threads=" << threads << " pairs=" << pairs.size() << " seconds=" << seconds
              << " completions/s=" << pairs.size() / seconds << " (equal " << counts[0]
              << ", not_equal " << counts[1] << ", unparseable " << counts[2] << ", timeout "
              << counts[3] << ")\n";
  }
  return 0;
}

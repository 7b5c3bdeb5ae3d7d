// See rewards.h.
#include "rl/rewards.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "eval/answer_extraction.h"
#include "eval/normalize.h"
#include "io/error.h"

namespace rqat::rl {

namespace {

std::string part_name(const WeightedReward& part) {
  return part.name.empty() ? part.reward->name() : part.name;
}

std::string trimmed(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Shortest text that reads back as the same double, so names round-trip through make_reward.
std::string weight_text(double w) { return fmt::format("{}", w); }

struct RegistryEntry {
  RewardFactory factory;
  double default_weight = 1;
};

class Registry {
 public:
  Registry() {
    entries_["math"] = {[] { return std::make_unique<MathCorrectnessReward>(); }, 1.0};
    entries_["math_boxed"] = {[] {
                                MathRewardOptions options;
                                options.boxed_only = true;
                                return std::make_unique<MathCorrectnessReward>(options);
                              },
                              1.0};
    // An indicator weighted 0.1 rather than a 0.1 bonus weighted 1: "format:0.2" then reads as
    // "a bonus of 0.2", and the part's logged value is the share of well-formed answers.
    entries_["format"] = {[] { return std::make_unique<BoxedFormatReward>(1.0); }, 0.1};
    entries_["format_last_box"] = {
        [] { return std::make_unique<BoxedFormatReward>(1.0, FormatRule::kLastBox); }, 0.1};
  }

  void add(const std::string& name, RewardFactory factory, double default_weight) {
    std::lock_guard lock(mutex_);
    if (entries_.count(name)) fail("register_reward: a reward named '{}' already exists", name);
    entries_[name] = {std::move(factory), default_weight};
  }

  std::optional<RegistryEntry> find(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;  // std::map keeps them sorted
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, RegistryEntry> entries_;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

bool valid_reward_name(const std::string& name) {
  if (name.empty() || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

RewardBreakdown RewardFunction::breakdown(const RewardInput& in) const {
  const double value = score(in);
  return {value, {{name(), 1.0, value}}};
}

MathCorrectnessReward::MathCorrectnessReward(MathRewardOptions options)
    : options_(std::move(options)) {}

std::string MathCorrectnessReward::name() const {
  return options_.boxed_only ? "math_boxed" : "math";
}

eval::GradeResult MathCorrectnessReward::grade(const RewardInput& in) const {
  // Extraction is linear in the completion and inside the grader's budget (docs/grading.md), so
  // a degenerate rollout that repeats a box 10^5 times is graded whole, as eval-math grades it.
  const std::string_view text = eval::strip_thinking(in.completion);
  if (!options_.boxed_only) return eval::grade(text, in.gold, options_.grade);
  // Extract here, then let the grader compare the bare answer (and still extract the gold).
  std::optional<std::string> boxed = eval::last_boxed(text);
  if (!boxed) {
    eval::GradeResult result;
    result.kind = eval::GradeKind::unparseable;
    result.gold_answer = in.gold;
    result.detail = "no \\boxed{} answer in the completion";
    return result;
  }
  eval::GradeOptions options = options_.grade;
  options.extract_prediction = false;
  return eval::grade(*boxed, in.gold, options);
}

double MathCorrectnessReward::score(const RewardInput& in) const {
  return grade(in).kind == eval::GradeKind::equal ? 1.0 : 0.0;
}

bool has_single_boxed_answer(std::string_view completion) {
  constexpr std::string_view kCommand = "\\boxed";
  const std::string_view text = eval::strip_thinking(completion);
  size_t found = std::string_view::npos;
  for (size_t pos = text.find(kCommand); pos != std::string_view::npos;
       pos = text.find(kCommand, pos + kCommand.size())) {
    const size_t after = pos + kCommand.size();
    if (after < text.size() && is_letter(text[after])) continue;  // \boxedtext: another command
    if (found != std::string_view::npos) return false;            // a second box
    found = pos;
  }
  if (found == std::string_view::npos) return false;
  size_t open = found + kCommand.size();
  while (open < text.size() && text[open] == ' ') ++open;
  if (open >= text.size() || text[open] != '{') return false;
  const size_t close = eval::matching_brace(text, open);
  if (close == std::string_view::npos) return false;
  return !trimmed(text.substr(open + 1, close - open - 1)).empty();
}

bool last_box_parses(std::string_view completion) {
  constexpr std::string_view kCommand = "\\boxed";
  const std::string_view text = eval::strip_thinking(completion);
  const size_t at = text.rfind(kCommand);
  if (at == std::string_view::npos) return false;
  const size_t open = at + kCommand.size();
  if (open >= text.size() || text[open] != '{') return false;
  int64_t depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return true;
  }
  return false;
}

BoxedFormatReward::BoxedFormatReward(double bonus, FormatRule rule) : bonus_(bonus), rule_(rule) {
  if (!std::isfinite(bonus)) fail("{} reward: the bonus must be finite, got {}", name(), bonus);
}

std::string BoxedFormatReward::name() const {
  return rule_ == FormatRule::kLastBox ? "format_last_box" : "format";
}

double BoxedFormatReward::score(const RewardInput& in) const {
  const bool formatted = rule_ == FormatRule::kLastBox
                             ? last_box_parses(in.completion)
                             : !in.truncated && has_single_boxed_answer(in.completion);
  return formatted ? bonus_ : 0.0;
}

CombinedReward::CombinedReward(std::vector<WeightedReward> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) fail("combined reward: needs at least one part");
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (!parts_[k].reward) fail("combined reward: part {} has no reward", k);
    if (!std::isfinite(parts_[k].weight))
      fail("combined reward: part '{}' has a non-finite weight {}", part_name(parts_[k]),
           parts_[k].weight);
  }
}

std::string CombinedReward::name() const {
  std::string out;
  for (const auto& part : parts_) {
    if (!out.empty()) out += '+';
    out += part_name(part);
    if (part.weight != 1.0) {
      out += ':';
      out += weight_text(part.weight);
    }
  }
  return out;
}

double CombinedReward::score(const RewardInput& in) const { return breakdown(in).total; }

RewardBreakdown CombinedReward::breakdown(const RewardInput& in) const {
  RewardBreakdown out;
  for (const auto& part : parts_) {
    const double value = part.reward->score(in);
    out.parts.push_back({part_name(part), part.weight, value});
    out.total += part.weight * value;
  }
  return out;
}

void register_reward(const std::string& name, RewardFactory factory, double default_weight) {
  if (!valid_reward_name(name))
    fail(
        "register_reward: '{}' is not a valid reward name (a lowercase letter, then lowercase "
        "letters, digits or '_')",
        name);
  if (!factory) fail("register_reward: the factory of '{}' is empty", name);
  if (!std::isfinite(default_weight))
    fail("register_reward: the default weight of '{}' must be finite, got {}", name,
         default_weight);
  registry().add(name, std::move(factory), default_weight);
}

std::vector<std::string> registered_rewards() { return registry().names(); }

std::unique_ptr<CombinedReward> make_reward(const std::string& spec, const std::string& flag) {
  std::vector<WeightedReward> parts;
  std::set<std::string> seen;
  size_t start = 0;
  while (true) {
    const size_t plus = spec.find('+', start);
    const std::string item = trimmed(
        std::string_view(spec).substr(start, plus == std::string::npos ? plus : plus - start));
    if (item.empty())
      fail("{} '{}': empty reward name (write parts as name or name:weight joined by '+')", flag,
           spec);
    const size_t colon = item.find(':');
    const std::string name = trimmed(std::string_view(item).substr(0, colon));
    const auto entry = registry().find(name);
    if (!entry)
      fail("{} '{}': unknown reward '{}' (known: {})", flag, spec, name,
           joined(registered_rewards()));
    if (!seen.insert(name).second) fail("{} '{}': reward '{}' appears twice", flag, spec, name);
    double weight = entry->default_weight;
    if (colon != std::string::npos) {
      const std::string text = trimmed(std::string_view(item).substr(colon + 1));
      char* end = nullptr;
      weight = text.empty() ? NAN : std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(weight))
        fail("{} '{}': the weight of '{}' must be a finite number, got '{}'", flag, spec, name,
             text);
    }
    std::unique_ptr<RewardFunction> reward = entry->factory();
    if (!reward) fail("{} '{}': the factory of reward '{}' returned nothing", flag, spec, name);
    parts.push_back({std::shared_ptr<const RewardFunction>(std::move(reward)), weight, name});
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  return std::make_unique<CombinedReward>(std::move(parts));
}

std::vector<RewardBreakdown> score_batch(const RewardFunction& reward,
                                         const std::vector<RewardInput>& inputs, unsigned threads) {
  std::vector<RewardBreakdown> results(inputs.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(1, inputs.size())));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  // Work is handed out one input at a time: grading costs vary by orders of magnitude.
  auto worker = [&] {
    for (size_t i = next++; i < inputs.size() && !failed; i = next++) {
      try {
        results[i] = reward.breakdown(inputs[i]);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
  return results;
}

}  // namespace rqat::rl

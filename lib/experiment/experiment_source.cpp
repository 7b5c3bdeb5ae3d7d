#include "experiment/experiment_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "experiment/yaml_bounds.h"
#include "io/error.h"

namespace rqat::experiment {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

// Bounds the text, then parses its first document; syntax errors name their line.
YAML::Node parse_bounded(const std::string& text, const YamlTextName& name,
                         const ExperimentLimits& limits) {
  check_yaml_nesting(text, name);
  check_yaml_expansion(text, name, limits.max_yaml_nodes);
  return YAML::Load(text);
}

YAML::Node parse_override_value(const std::string& text, const std::string& flag,
                                const ExperimentLimits& limits) {
  try {
    return parse_bounded(text, {flag, false}, limits);
  } catch (const YAML::Exception&) {
    return YAML::Node(text);  // not valid YAML on its own (e.g. "a: b: c"): take it as a string
  }
}

}  // namespace

std::string read_experiment_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!std::filesystem::is_regular_file(file) || !in)
    fail("{}: no such experiment file", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: cannot read the experiment file", file.string());
  return text.str();
}

ExperimentSource::ExperimentSource(const std::filesystem::path& file, const std::string& text,
                                   const std::vector<std::string>& overrides,
                                   const ExperimentLimits& limits)
    : file_(file), limits_(limits) {
  try {
    root_ = parse_bounded(text, {file.string(), true}, limits);
  } catch (const YAML::ParserException& e) {
    fail("{}:{}:{}: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const YAML::Exception& e) {
    fail("{}: {}", file.string(), e.what());
  }
  if (!root_.IsMap())
    fail("{}: an experiment file is a YAML mapping (name, stages, ...)", file.string());
  for (const auto& item : overrides) apply_override(item);
}

void ExperimentSource::apply_override(const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0) fail("--set {}: expected KEY=VALUE", item);
  std::string key = item.substr(0, eq);
  const std::string flag = "--set " + key;
  // `seeds` is a top-level key (the training seeds' sweep), not a variable.
  if (key.find('.') == std::string::npos && key != "seeds") key = "vars." + key;
  const auto parts = split_path(key);
  if (std::any_of(parts.begin(), parts.end(), [](const auto& p) { return p.empty(); }))
    fail("{}: empty component in the key", flag);
  // reset() rebinds the handle; plain assignment would overwrite the node it points to.
  YAML::Node node;
  node.reset(root_);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!node[parts[i]] || node[parts[i]].IsNull())
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    YAML::Node child;
    child.reset(node[parts[i]]);
    if (!child.IsMap())
      fail("{}: {} is not a mapping", flag,
           fmt::format("{}", fmt::join(parts.begin(), parts.begin() + i + 1, ".")));
    node.reset(child);
  }
  node[parts.back()] = parse_override_value(item.substr(eq + 1), flag, limits_);
  overridden_[key] = flag;
}

SourceLocation ExperimentSource::where(const std::string& path, const YAML::Node& node) const {
  for (const auto& [key, flag] : overridden_) {
    if (path == key || (path.size() > key.size() && path.compare(0, key.size(), key) == 0 &&
                        path[key.size()] == '.'))
      return {flag, 0, 0};
  }
  SourceLocation location{file_.string(), 0, 0};
  const auto mark = node.Mark();
  if (!mark.is_null()) {
    location.line = mark.line + 1;
    location.column = mark.column + 1;
  }
  return location;
}

void ExperimentSource::fail_at(const std::string& path, const YAML::Node& node,
                               const std::string& message) const {
  fail("{}: {}: {}", where(path, node).to_string(), path, message);
}

std::string scalar_text(const ExperimentSource& source, const std::string& path,
                        const YAML::Node& node) {
  if (!node.IsScalar()) source.fail_at(path, node, "expected a single value (text or number)");
  return node.Scalar();
}

int non_negative_int(const ExperimentSource& source, const std::string& path,
                     const YAML::Node& node) {
  const std::string text = scalar_text(source, path, node);
  const bool digits =
      !text.empty() && text.size() < 9 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    source.fail_at(path, node, fmt::format("expected a non-negative integer, got '{}'", text));
  return std::stoi(text);
}

void require_map(const ExperimentSource& source, const std::string& path, const YAML::Node& node) {
  if (!node.IsMap()) source.fail_at(path, node, "expected a mapping (key: value lines)");
}

void check_keys(const ExperimentSource& source, const std::string& path, const YAML::Node& map,
                const std::vector<std::string>& allowed) {
  require_map(source, path, map);
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      const std::string child = path.empty() ? key : path + "." + key;
      source.fail_at(child, it->first,
                     fmt::format("unknown key (expected one of: {})", fmt::join(allowed, ", ")));
    }
  }
}

bool is_plain_bool(const YAML::Node& node, bool value) {
  return node.IsScalar() && node.Tag() != "!" && node.Scalar() == (value ? "true" : "false");
}

}  // namespace rqat::experiment

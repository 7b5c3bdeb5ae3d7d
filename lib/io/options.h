// Options declared once, in the manner of gemma.cpp's ForEach(visitor) on its Args: an options
// struct lists each of its fields once, with its name, help and role, in a static member template
// that serves both a const struct (visitors that read) and a mutable one (flags that write):
//
//   template <class Self, class Visitor> static void for_each(Self& self, Visitor& v) {
//     v.value(self.steps, "steps", "Optimizer steps");
//     v.value(self.lr.decay, "schedule", "Decay after warmup");  // enum_names.h
//     v.value(self.log_every, "log-every", "Progress line every N steps", Role::kRunControl);
//   }
//
// and everything that lists options is a visitor of that one declaration: the CLI11 flags
// (cli/option_flags.h: "--" + prefix + name), the resume fingerprint and the manifest's
// configuration (options_json below: name with '_' for '-'), the printed configuration table
// (options_table), and the test that changes each setting in turn and expects --resume to refuse.
// A setting added to the declaration is therefore in all of them.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "io/enum_names.h"
#include "io/json_file.h"

namespace rqat::io {

// kSetting: changes what a run computes; a checkpoint resumes only with the same settings.
// kRunControl: how a run is watched and kept (logging, evaluation and checkpoint cadence, resume,
// micro-batching, which changes memory, not the numbers); it may change between a checkpoint and
// its resumption.
enum class Role { kSetting, kRunControl };

// The JSON key of an option name: "adam-beta1" -> "adam_beta1".
inline std::string option_key(std::string_view name) {
  std::string key(name);
  for (char& c : key)
    if (c == '-') c = '_';
  return key;
}

template <class T>
io::Json option_json_value(const T& value) {
  if constexpr (std::is_same_v<T, std::filesystem::path>) {
    return value.string();
  } else if constexpr (NamedEnum<T>) {
    return std::string(enum_name(value));
  } else if constexpr (requires { value.has_value(); }) {
    return value ? option_json_value(*value) : io::Json(nullptr);
  } else {
    return value;
  }
}

// Collects options into a JSON object: the settings only (a resume fingerprint) or every option
// (a manifest's configuration), in declaration order (io::Json keeps insertion order).
class JsonOptionVisitor {
 public:
  explicit JsonOptionVisitor(bool settings_only) : settings_only_(settings_only) {}

  template <class T>
  void value(const T& field, std::string_view name, std::string_view /*help*/,
             Role role = Role::kSetting) {
    if (keep(role)) json_[option_key(name)] = option_json_value(field);
  }
  io::Json take() { return std::move(json_); }

 private:
  bool keep(Role role) const { return !settings_only_ || role == Role::kSetting; }
  bool settings_only_;
  io::Json json_ = io::Json::object();
};

// The settings of `options` (for_each'd) as a JSON object: what a resumed run must share.
template <class Options>
io::Json settings_json(const Options& options) {
  JsonOptionVisitor visitor(/*settings_only=*/true);
  Options::for_each(options, visitor);
  return visitor.take();
}

// Every option of `options` as a JSON object (for manifests).
template <class Options>
io::Json options_json(const Options& options) {
  JsonOptionVisitor visitor(/*settings_only=*/false);
  Options::for_each(options, visitor);
  return visitor.take();
}

// "name  value" lines of every option, for a printed configuration.
template <class Options>
std::string options_table(const Options& options, std::string_view prefix = "") {
  std::string out;
  const io::Json json = options_json(options);  // items() does not keep a temporary alive
  for (const auto& [key, value] : json.items())
    out += fmt::format("  {}{:<24} {}\n", prefix, key, value.dump());
  return out;
}

}  // namespace rqat::io

// Options declared once, in the manner of gemma.cpp's ForEach(visitor) on its Args: an options
// struct lists each of its fields once, with its name, help and role, in a static member template
// that serves both a const struct (visitors that read) and a mutable one (flags that write):
//
//   template <class Self, class Visitor> static void for_each(Self& self, Visitor& v) {
//     v.value(self.steps, "steps", "Optimizer steps");
//     v.value(self.lr.decay, "schedule", "Decay after warmup");  // enum_names.h
//     v.value(self.log_every, "log-every", "Progress line every N steps", Role::kRunControl);
//     v.value(self.model, "model", "Input model directory", Role::kSetting, {.required = true});
//     io::section(v, "Quantization", self.spec);                 // QuantSpec::for_each, grouped
//     io::section(v, "Calibration", self.calib, {.prefix = "calib-"});
//   }
//
// and everything that lists options is a visitor of that one declaration: the CLI11 flags
// (cli/option_flags.h: "--" + the section prefixes + name, grouped under the section titles in
// --help), the resume fingerprint and the manifest's configuration (options_json below: the same
// name with '_' for '-'), the printed configuration table (options_table), and the tests that
// change each setting in turn and expect --resume to refuse, and that find every option of a
// tool in its --help, its fingerprint and its manifest. A setting added to the declaration is
// therefore in all of them. A tool's configuration (cli/*_config.h) is one such declaration made
// of sections, each the declaration of the struct it configures.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
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

// How an option is given on the command line beyond its type (flags only; JSON ignores it).
struct FlagForm {
  bool required = false;           // the tool refuses to start without it
  bool positional = false;         // given without "--name" (e.g. rqat traces' input files)
  std::string_view negation = {};  // a switch's spelling that turns it off (e.g. "no-cuda-graphs")
  // Another spelling: a letter gives "-x" (rqat run's -j for --jobs), a word "--word" (rqat run's
  // --out for --run-dir).
  std::string_view alias = {};
  // The value of an option given without one (rqat status's --watch alone: every 10 seconds); a
  // value may still follow it.
  std::string_view implicit = {};
};

// How a section's options are named where a tool offers them: a prefix ("calib-" for
// --calib-*), options it leaves out, and spellings kept from before the declaration (option
// name -> name before the prefix, e.g. rqat nll's --field for the declared text-field).
struct Naming {
  std::string prefix = {};
  std::set<std::string, std::less<>> skip = {};
  std::map<std::string, std::string, std::less<>> rename = {};
};

// The sections a visitor is inside: their titles (--help groups) and their naming, which
// composes from the innermost section out (a skip or a rename sees the name as that section
// declares it, then the outer sections' prefixes are prepended).
class OptionScope {
 public:
  explicit OptionScope(Naming outermost = {}) { levels_.push_back({"", std::move(outermost)}); }

  void begin_section(std::string_view title, Naming naming) {
    levels_.push_back(
        {std::string(title.empty() ? levels_.back().title : title), std::move(naming)});
  }
  void end_section() { levels_.pop_back(); }
  // Options declared after this, in the current section, are listed under `title`.
  void group(std::string_view title) { levels_.back().title = title; }

  // The name (without "--") option `name` has here; nullopt when a section leaves it out.
  std::optional<std::string> name_of(std::string_view name) const {
    std::string out(name);
    for (auto level = levels_.rbegin(); level != levels_.rend(); ++level) {
      if (level->naming.skip.count(out)) return std::nullopt;
      if (const auto renamed = level->naming.rename.find(out);
          renamed != level->naming.rename.end())
        out = renamed->second;
      out = level->naming.prefix + out;
    }
    return out;
  }
  const std::string& title() const { return levels_.back().title; }

 private:
  struct Level {
    std::string title;
    Naming naming;
  };
  std::vector<Level> levels_;
};

// Visits the declaration of `nested` (a struct with for_each) as a section of the current one:
// listed under `title` in --help (empty: the enclosing title), named by `naming`.
template <class Visitor, class Section>
void section(Visitor& v, std::string_view title, Section& nested, Naming naming = {}) {
  v.begin_section(title, std::move(naming));
  std::remove_const_t<Section>::for_each(nested, v);
  v.end_section();
}

// Lists the options declared after it, in the current section, under `title` in --help.
template <class Visitor>
void heading(Visitor& v, std::string_view title) {
  v.group(title);
}

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
class JsonOptionVisitor : public OptionScope {
 public:
  explicit JsonOptionVisitor(bool settings_only) : settings_only_(settings_only) {}

  template <class T>
  void value(const T& field, std::string_view name, std::string_view /*help*/,
             Role role = Role::kSetting, FlagForm /*form*/ = {}) {
    if (!keep(role)) return;
    if (const auto named = name_of(name)) json_[option_key(*named)] = option_json_value(field);
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

// The current fingerprint as comparable with one recorded earlier: a record from before the
// tools recorded their declared options has no "options" (the rest holds every setting it had),
// and a setting declared since, left unset (null) now, did not exist for the record's run.
inline Json comparable_fingerprint(Json current, const Json& saved) {
  if (!current.is_object() || !current.contains("options")) return current;
  if (!saved.is_object() || !saved.contains("options")) {
    current.erase("options");
    return current;
  }
  const Json& saved_options = saved["options"];
  Json& options = current["options"];
  if (!saved_options.is_object() || !options.is_object()) return current;
  for (auto it = options.begin(); it != options.end();) {
    if (it.value().is_null() && !saved_options.contains(it.key()))
      it = options.erase(it);
    else
      ++it;
  }
  return current;
}

// A tool's declared configuration as its run records it (cli/*_config.h): every option, in the
// manifest's configuration, and the settings, in the resume fingerprint. Null when a library
// caller made the options without a configuration.
struct OptionsRecord {
  Json options = nullptr;
  Json settings = nullptr;

  template <class Config>
  static OptionsRecord of(const Config& config) {
    return {options_json(config), settings_json(config)};
  }
};

// One declared option as a tool offers it: what the tests compare with --help, the fingerprint
// and the manifest.
struct DeclaredOption {
  std::string name;  // as flagged, without "--" (a section's prefix and renames applied)
  Role role = Role::kSetting;
  FlagForm form;
};

class DeclaredOptionVisitor : public OptionScope {
 public:
  template <class T>
  void value(const T& /*field*/, std::string_view name, std::string_view /*help*/,
             Role role = Role::kSetting, FlagForm form = {}) {
    if (const auto named = name_of(name)) options.push_back({*named, role, form});
  }
  std::vector<DeclaredOption> options;
};

// Every option `options` declares, in declaration order.
template <class Options>
std::vector<DeclaredOption> declared_options(const Options& options) {
  DeclaredOptionVisitor visitor;
  Options::for_each(options, visitor);
  return std::move(visitor.options);
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

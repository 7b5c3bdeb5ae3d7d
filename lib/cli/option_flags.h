// CLI11 flags from an options declaration (io/options.h): one flag per option, "--" + prefix +
// name, its help (which names an enum's choices), its default shown. Enums take their names
// (io/enum_names.h) and an unknown name is a one-line error naming the flag and the choices; bools
// are switches.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "io/enum_names.h"
#include "io/error.h"
#include "io/options.h"

namespace rqat::cli {

struct FlagSelection {
  std::string prefix;                       // e.g. "calib-" for --calib-*
  std::set<std::string, std::less<>> skip;  // option names a tool does not offer
  // Spellings a tool kept from before the declaration (option name -> flag name, before the
  // prefix), e.g. rqat nll's --field for the declared text-field.
  std::map<std::string, std::string, std::less<>> rename;
};

class FlagVisitor {
 public:
  FlagVisitor(CLI::App& app, FlagSelection selection)
      : app_(app), selection_(std::move(selection)) {}

  // An enum (io/enum_names.h) takes its names; a parse error is a CLI11 error, so that
  // CLI11_PARSE reports it (in one line, add_runtime_flags).
  template <class T>
  void value(T& field, std::string_view name, std::string_view help,
             io::Role /*role*/ = io::Role::kSetting) {
    if (skipped(name)) return;
    const std::string f = flag(name);
    if constexpr (NamedEnum<T>) {
      app_.add_option_function<std::string>(
              f,
              [&field, f](const std::string& text) {
                try {
                  field = parse_enum<T>(text, f);
                } catch (const Error& e) {
                  throw CLI::ValidationError(e.what());
                }
              },
              std::string(help))
          ->default_str(std::string(enum_name(field)));
    } else if constexpr (std::is_same_v<T, bool>) {
      app_.add_flag(f, field, std::string(help));
    } else {
      app_.add_option(f, field, std::string(help))->capture_default_str();
    }
  }

 private:
  bool skipped(std::string_view name) const { return selection_.skip.count(name) > 0; }
  std::string flag(std::string_view name) const {
    const auto renamed = selection_.rename.find(name);
    return "--" + selection_.prefix +
           (renamed == selection_.rename.end() ? std::string(name) : renamed->second);
  }

  CLI::App& app_;
  FlagSelection selection_;
};

// One flag for one field, as a declaration's would be (an enum takes its names).
template <class T>
void add_option_flag(CLI::App& app, T& field, std::string_view name, std::string_view help) {
  FlagVisitor(app, {}).value(field, name, help);
}

// Adds the flags of every option of `options` (an Options::for_each declaration) to `app`.
template <class Options>
void add_option_flags(CLI::App& app, Options& options, FlagSelection selection = {}) {
  FlagVisitor visitor(app, std::move(selection));
  Options::for_each(options, visitor);
}

}  // namespace rqat::cli

// CLI11 flags from an options declaration (io/options.h): one flag per option, "--" + prefix +
// name, its help (which names an enum's choices), its default shown. Enums take their names
// (io/enum_names.h) and an unknown name is a one-line error naming the flag and the choices; bools
// are switches.
#pragma once

#include <CLI/CLI.hpp>

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
};

class FlagVisitor {
 public:
  FlagVisitor(CLI::App& app, FlagSelection selection)
      : app_(app), selection_(std::move(selection)) {}

  template <class T>
  void value(T& field, std::string_view name, std::string_view help,
             io::Role /*role*/ = io::Role::kSetting) {
    if (skipped(name)) return;
    if constexpr (std::is_same_v<T, bool>)
      app_.add_flag(flag(name), field, std::string(help));
    else
      app_.add_option(flag(name), field, std::string(help))->capture_default_str();
  }

  template <class E, size_t N>
  void choice(E& field, const EnumName<E> (&table)[N], std::string_view name, std::string_view help,
              io::Role /*role*/ = io::Role::kSetting) {
    if (skipped(name)) return;
    const std::string f = flag(name);
    app_.add_option_function<std::string>(
            f,
            [&field, &table, f](const std::string& text) {
              // A CLI11 error, so that CLI11_PARSE reports it (in one line, add_runtime_flags).
              try {
                field = parse_enum(table, text, f);
              } catch (const Error& e) {
                throw CLI::ValidationError(e.what());
              }
            },
            std::string(help))
        ->default_str(std::string(enum_name(table, field)));
  }

 private:
  bool skipped(std::string_view name) const { return selection_.skip.count(name) > 0; }
  std::string flag(std::string_view name) const {
    return "--" + selection_.prefix + std::string(name);
  }

  CLI::App& app_;
  FlagSelection selection_;
};

// Adds the flags of every option of `options` (an Options::for_each declaration) to `app`.
template <class Options>
void add_option_flags(CLI::App& app, Options& options, FlagSelection selection = {}) {
  FlagVisitor visitor(app, std::move(selection));
  Options::for_each(options, visitor);
}

}  // namespace rqat::cli

// CLI11 flags from an options declaration (io/options.h): one flag per option, "--" + the
// sections' prefixes + name, its help, its default shown, listed in --help under its section's
// title; required and positional options as the declaration's io::FlagForm says. Enums take their
// names (io/enum_names.h) and an unknown name is a one-line error naming the flag and the choices;
// bools are switches.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>

#include "io/enum_names.h"
#include "io/error.h"
#include "io/options.h"

namespace rqat::cli {

// How a tool offers a declaration's options (io::Naming: prefix, skipped, renamed).
using FlagSelection = io::Naming;

class FlagVisitor : public io::OptionScope {
 public:
  FlagVisitor(CLI::App& app, FlagSelection selection)
      : io::OptionScope(std::move(selection)), app_(app) {}

  // An enum (io/enum_names.h), or an optional one, takes its names; a parse error is a CLI11
  // error, so that CLI11_PARSE reports it (in one line, one_line_parse_errors).
  template <class T>
  void value(T& field, std::string_view name, std::string_view help,
             io::Role /*role*/ = io::Role::kSetting, io::FlagForm form = {}) {
    const auto named = name_of(name);
    if (!named) return;
    const std::string f = form.positional ? *named : "--" + *named;
    const std::string names = with_alias(f, form.alias);
    CLI::Option* option = nullptr;
    if constexpr (NamedEnum<T>) {
      option = enum_option<T>(names, f, help, [&field](T parsed) { field = parsed; });
      option->default_str(std::string(enum_name(field)));
    } else if constexpr (is_optional_enum<T>) {
      option = enum_option<typename T::value_type>(names, f, help,
                                                   [&field](auto parsed) { field = parsed; });
    } else if constexpr (std::is_same_v<T, bool>) {
      const std::string spelling =
          form.negation.empty() ? names : names + ",!--" + std::string(form.negation);
      option = app_.add_flag(spelling, field, std::string(help));
    } else if constexpr (requires { field.has_value(); }) {
      option = app_.add_option(names, field, std::string(help));  // no default to show
    } else {
      option = app_.add_option(names, field, std::string(help))->capture_default_str();
    }
    if (!form.implicit.empty()) option->expected(0, 1)->default_str(std::string(form.implicit));
    if (!title().empty()) option->group(title());
    if (form.required) option->required();
  }

 private:
  template <class T>
  static constexpr bool is_optional_enum = requires(T t) {
    requires NamedEnum<typename T::value_type>;
    t.has_value();
  };

  // CLI11's names of the option: "-x,--name" or "--name,--word" with an alias (io::FlagForm).
  static std::string with_alias(const std::string& f, std::string_view alias) {
    if (alias.empty()) return f;
    if (alias.size() == 1) return "-" + std::string(alias) + "," + f;
    return f + ",--" + std::string(alias);
  }

  // `names`: CLI11's spellings; `f`: the one parse errors name.
  template <class E, class Assign>
  CLI::Option* enum_option(const std::string& names, const std::string& f, std::string_view help,
                           Assign assign) {
    return app_.add_option_function<std::string>(
        names,
        [assign, f](const std::string& text) {
          try {
            assign(parse_enum<E>(text, f));
          } catch (const Error& e) {
            throw CLI::ValidationError(e.what());
          }
        },
        std::string(help));
  }

  CLI::App& app_;
};

// Adds the flags of every option of `options` (an Options::for_each declaration) to `app`.
template <class Options>
void add_option_flags(CLI::App& app, Options& options, FlagSelection selection = {}) {
  FlagVisitor visitor(app, std::move(selection));
  Options::for_each(options, visitor);
}

}  // namespace rqat::cli

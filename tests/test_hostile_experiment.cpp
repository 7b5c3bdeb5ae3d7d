// Hostile experiment files (issue 18, docs/reliability.md): inputs that ask for exponential or
// unbounded work (nested aliases, huge sweeps, deep nesting, multiplying variables, long stage
// chains) end quickly in one line naming FILE:LINE. Every input is generated here.
#include "catch.h"

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "experiment/experiment_loader.h"
#include "experiment/yaml_bounds.h"
#include "io/error.h"
#include "test_util.h"

using namespace rqat::experiment;
using rqat::test::require_error;
using rqat::test::TempDir;

namespace {

// A minimal valid experiment around `body` (top-level keys: vars, sweep, ...).
std::string experiment_with(const std::string& body) {
  return "name: hostile\n" + body + "stages:\n  ptq:\n    tool: ptq\n    args: {bits: 3}\n";
}

PlanOptions options_for(const std::string& name) {
  PlanOptions options;
  options.experiment_file = name;
  options.run_dir = "run";
  options.check_input_paths = false;
  return options;
}

ExperimentPlan plan_from_text(const std::string& yaml, const ExperimentLimits& limits = {}) {
  PlanOptions options = options_for("hostile.yaml");
  options.limits = limits;
  return load_experiment_plan_from_text(yaml, options);
}

// The error names the text and a line, and comes within a few seconds (the inputs would take
// hours, or exhaust memory or the stack, without the bounds).
void require_quick_error(const std::function<void()>& fn,
                         std::initializer_list<std::string> needles) {
  const auto start = std::chrono::steady_clock::now();
  require_error(fn, needles);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 5.0);
}

// Levels of anchors, each a list of `width` aliases of the one before: width^levels leaves.
std::string nested_aliases(int levels, int width) {
  std::string yaml = "vars:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= levels; ++level) {
    std::vector<std::string> items(width, fmt::format("*l{}", level - 1));
    yaml += fmt::format("  l{}: &l{} [{}]\n", level, level, fmt::join(items, ", "));
  }
  return yaml;
}

}  // namespace

TEST_CASE("nested aliases (billion laughs) are counted before any walk and refused") {
  // 10 levels of 10: 10^11 nodes as a walk sees them, from 600 bytes. l0 to l4 expand to about
  // 123,000 nodes; l5 (line 8) to 1.1 million, so the count passes the limit on l5's line.
  const std::string yaml = experiment_with(nested_aliases(10, 10));
  require_quick_error([&] { plan_from_text(yaml); },
                      {"hostile.yaml:8:", "more than 1000000 nodes", "--max-yaml-nodes"});
}

TEST_CASE("diamond-shaped aliases (two keys per level naming the level below) are refused") {
  std::string yaml = "vars:\n  d0: &d0 {a: x, b: y}\n";
  for (int level = 1; level <= 60; ++level)
    yaml += fmt::format("  d{}: &d{} {{a: *d{}, b: *d{}}}\n", level, level, level - 1, level - 1);
  require_quick_error([&] { plan_from_text(experiment_with(yaml)); },
                      {"hostile.yaml:", "more than 1000000 nodes"});
}

TEST_CASE("aliases within the node limit load; --max-yaml-nodes moves the limit") {
  // A shared list used by two sweep axes and a variable: the ordinary use of anchors.
  const std::string yaml =
      experiment_with("vars:\n  widths: &w [2, 3]\nsweep:\n  grid:\n    bits: *w\n    group: *w\n");
  const auto plan = plan_from_text(yaml);
  CHECK(plan.sweep_variables == std::vector<std::string>{"bits", "group"});

  // Three levels of ten: about 12,000 nodes, over a limit of 1,000.
  const std::string three_levels = experiment_with(nested_aliases(3, 10));
  ExperimentLimits small;
  small.max_yaml_nodes = 1000;
  require_quick_error([&] { plan_from_text(three_levels, small); },
                      {"hostile.yaml:", "more than 1000 nodes"});
  // Under the default the count passes, and the file fails for what it is: nested lists.
  require_quick_error([&] { plan_from_text(three_levels); },
                      {"hostile.yaml:", "list items must be single values"});
}

TEST_CASE("an alias inside the node it names is refused, not followed") {
  require_quick_error([] { plan_from_text(experiment_with("vars:\n  a: &a [x, *a]\n")); },
                      {"hostile.yaml:3:", "alias *a is inside the node it names"});
  require_quick_error([] { plan_from_text(experiment_with("vars:\n  m: &m\n    self: *m\n")); },
                      {"hostile.yaml:4:", "alias *m is inside the node it names"});
}

TEST_CASE("deep nesting is refused before yaml-cpp's recursive parser sees it") {
  const std::string brackets(100000, '[');
  require_quick_error([&] { plan_from_text(experiment_with("vars:\n  x: " + brackets + "\n")); },
                      {"hostile.yaml:3:", "nested deeper than 128 levels"});
  std::string maps;
  for (int i = 0; i < 100000; ++i) maps += "{a: ";
  require_quick_error([&] { plan_from_text(experiment_with("vars:\n  x: " + maps + "\n")); },
                      {"hostile.yaml:3:", "nested deeper than 128 levels"});
  std::string dashes;
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  require_quick_error(
      [&] { plan_from_text(experiment_with("vars:\n  x:\n    " + dashes + "x\n")); },
      {"hostile.yaml:4:", "nested deeper than 128 levels"});
  // Block indentation, one more space per level: the 129th level is on line 2 + 128 or before.
  std::string indented = "vars:\n";
  for (int i = 1; i <= 1000; ++i) indented += std::string(i, ' ') + fmt::format("k{}:\n", i);
  require_quick_error([&] { plan_from_text(experiment_with(indented)); },
                      {"hostile.yaml:", "nested deeper than 128 levels"});
}

TEST_CASE("--set values are bounded like the file, and named by their flag") {
  PlanOptions options = options_for("hostile.yaml");
  options.overrides = {"x=" + std::string(1000, '[')};
  require_quick_error([&] { load_experiment_plan_from_text(experiment_with(""), options); },
                      {"--set x: YAML nested deeper than 128 levels"});
  options.overrides = {"x=[&a [x, x, x, x, x, x, x, x, x, x], [*a, *a, *a, *a], [*a, *a]]"};
  options.limits.max_yaml_nodes = 50;
  require_quick_error([&] { load_experiment_plan_from_text(experiment_with(""), options); },
                      {"--set x: YAML expands to more than 50 nodes"});
}

TEST_CASE("the nesting estimate ignores brackets in quotes, comments and block scalars") {
  const std::string brackets(500, '[');
  const std::string yaml =
      "name: quoted\n"
      "description: \"" +
      brackets +
      "\"\n"
      "# " +
      brackets +
      "\n"
      "vars:\n"
      "  single: '" +
      brackets +
      " it''s'\n"
      "  block: |\n"
      "    " +
      brackets +
      "\n"
      "    - - - - -\n"
      "  after: [1, 2]\n"
      "stages:\n  ptq: {tool: ptq}\n";
  CHECK_NOTHROW(check_yaml_nesting(yaml, {"quoted.yaml"}));
  CHECK_NOTHROW(plan_from_text(yaml));
}

TEST_CASE("sweeps are counted before they are expanded") {
  // 30 axes of 10 values: 10^30 points.
  std::string grid = "sweep:\n  grid:\n";
  for (int axis = 0; axis < 30; ++axis)
    grid += fmt::format("    a{}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", axis);
  require_quick_error([&] { plan_from_text(experiment_with(grid)); },
                      {"hostile.yaml:3:", "sweep", "more than 10^19 points",
                       "more than the limit of 10000", "--max-sweep-points"});
  // Crossed with a zip; the count is exact while it fits.
  const std::string crossed =
      "sweep:\n  grid:\n    a: [1, 2, 3]\n    b: [1, 2, 3, 4]\n  zip:\n    c: [1, 2]\n";
  ExperimentLimits limits;
  limits.max_sweep_points = 23;
  require_quick_error([&] { plan_from_text(experiment_with(crossed), limits); },
                      {"hostile.yaml:3:", "24 points (3 x 4 x 2)", "limit of 23"});
  limits.max_sweep_points = 24;
  CHECK(plan_from_text(experiment_with(crossed), limits).stages.size() == 1);
  // --set may enlarge a sweep: the count is taken after the overrides, and names the flag.
  PlanOptions options = options_for("hostile.yaml");
  options.limits.max_sweep_points = 24;
  options.overrides = {"sweep.grid.a=[1, 2, 3, 4]"};
  require_quick_error([&] { load_experiment_plan_from_text(experiment_with(crossed), options); },
                      {"32 points"});
}

TEST_CASE("variables that use each other several times are bounded") {
  // v0 uses v1 twice, v1 uses v2 twice, ...: 2^40 references.
  std::string doubling = "vars:\n";
  for (int i = 0; i < 40; ++i)
    doubling += fmt::format("  v{}: \"${{v{}}}${{v{}}}\"\n", i, i + 1, i + 1);
  doubling += "  v40: x\n";
  const std::string uses_v0 = "name: hostile\n" + doubling +
                              "stages:\n  ptq:\n    tool: ptq\n    args: {bits: \"${v0}\"}\n";
  require_quick_error([&] { plan_from_text(uses_v0); },
                      {"hostile.yaml:", "more than 10000 ${...} references"});

  // Few references, long text: 20 doublings of 4 KiB is 4 GiB.
  std::string text_doubling = "vars:\n";
  for (int i = 0; i < 20; ++i)
    text_doubling += fmt::format("  t{}: \"${{t{}}}${{t{}}}\"\n", i, i + 1, i + 1);
  text_doubling += "  t20: " + std::string(4096, 'y') + "\n";
  const std::string uses_t0 = "name: hostile\n" + text_doubling +
                              "stages:\n  ptq:\n    tool: ptq\n    args: {bits: \"${t0}\"}\n";
  require_quick_error([&] { plan_from_text(uses_t0); },
                      {"hostile.yaml:", "more than 1048576 characters"});

  // Diamonds: v_i uses w_i and x_i, which both use v_{i+1} (2^30 paths through 90 variables).
  std::string diamonds = "vars:\n";
  for (int i = 0; i < 30; ++i) {
    diamonds += fmt::format("  v{}: \"${{w{}}}${{x{}}}\"\n", i, i, i);
    diamonds += fmt::format("  w{}: \"${{v{}}}\"\n  x{}: \"${{v{}}}\"\n", i, i + 1, i, i + 1);
  }
  diamonds += "  v30: z\n";
  const std::string uses_diamonds = "name: hostile\n" + diamonds +
                                    "stages:\n  ptq:\n    tool: ptq\n    args: {bits: \"${v0}\"}\n";
  require_quick_error([&] { plan_from_text(uses_diamonds); },
                      {"hostile.yaml:", "more than 10000 ${...} references"});
}

TEST_CASE("long chains of variables and self-references end in one line") {
  // a0 uses a1 uses a2 ... 100,000 deep: each level would be stack frames of the resolver.
  std::string chain = "vars:\n";
  for (int i = 0; i < 100000; ++i) chain += fmt::format("  a{}: \"-${{a{}}}\"\n", i, i + 1);
  chain += "  a100000: end\n";
  const std::string uses_chain =
      "name: hostile\n" + chain + "stages:\n  ptq:\n    tool: ptq\n    args: {bits: \"${a0}\"}\n";
  require_quick_error([&] { plan_from_text(uses_chain); },
                      {"hostile.yaml:", "variables use variables more than 64 levels deep"});
  require_quick_error(
      [] {
        plan_from_text(
            "name: hostile\nvars:\n  a: \"x${a}\"\n"
            "stages:\n  ptq:\n    tool: ptq\n    args: {bits: \"${a}\"}\n");
      },
      {"hostile.yaml:", "cycle: a -> a"});
}

TEST_CASE("a stage directory where no stage is being built is an error, not a crash") {
  require_quick_error(
      [] {
        plan_from_text(
            "name: hostile\nvars:\n  dir: ${stage:ptq}\nsweep:\n  grid:\n    bits: [2, 3]\n"
            "stages:\n  ptq:\n    tool: ptq\n  eval:\n    tool: eval-math\n"
            "    only: {dir: x}\n");
      },
      {"hostile.yaml:", "${stage:ptq} can only be used in a stage"});
  // The run directory (without --out) is resolved before any stage.
  PlanOptions options = options_for("hostile.yaml");
  options.run_dir.reset();
  require_quick_error(
      [&] {
        load_experiment_plan_from_text(
            "name: hostile\nout: ${stage:ptq}\nstages:\n  ptq:\n    tool: ptq\n", options);
      },
      {"hostile.yaml:2:", "can only be used in a stage"});
}

TEST_CASE("a long chain of stages is ordered without recursion or quadratic rescans") {
  // Each stage the input of the next, written last to first: the worst order for a rescan.
  const int count = 20000;
  auto chain = [&](const std::string& first_stage_inputs) {
    std::string yaml = "name: chain\nstages:\n";
    for (int i = count - 1; i >= 1; --i)
      yaml += fmt::format("  s{}: {{tool: ptq, inputs: {{model: s{}}}}}\n", i, i - 1);
    return yaml + "  s0: {tool: ptq" + first_stage_inputs + "}\n";
  };
  const std::string yaml = chain("");
  const auto start = std::chrono::steady_clock::now();
  const auto plan = plan_from_text(yaml);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(plan.stages.size() == static_cast<size_t>(count));
  CHECK(plan.stages.front().id == "s0");
  CHECK(plan.stages.back().id == fmt::format("s{}", count - 1));
  CHECK(seconds < 20.0);
  // A cycle through the whole chain is found and shown.
  const std::string cycle = chain(fmt::format(", inputs: {{model: s{}}}", count - 1));
  require_error([&] { plan_from_text(cycle); }, {"dependency cycle: s"});
}

TEST_CASE("the in-memory entry point and the file reader give the same plan") {
  TempDir dir("hostile-same");
  const std::string yaml = experiment_with("sweep:\n  grid:\n    bits: [2, 3]\n");
  rqat::test::write_bytes(dir / "exp.yaml", yaml);
  PlanOptions options;
  options.experiment_file = dir / "exp.yaml";
  options.run_dir = dir / "run";
  const auto from_file = load_experiment_plan(options);
  const auto from_text = load_experiment_plan_from_text(yaml, options);
  CHECK(plan_to_json(from_file) == plan_to_json(from_text));
  require_error([&] { load_experiment_plan_from_text("name: [", options_for("mem.yaml")); },
                {"mem.yaml:"});
  options.experiment_file = dir / "missing.yaml";
  require_error([&] { load_experiment_plan(options); }, {"missing.yaml: no such experiment file"});
}

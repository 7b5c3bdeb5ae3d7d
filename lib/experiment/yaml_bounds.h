// Bounds on the work a YAML text can ask of its readers, checked before anything walks it
// (docs/reliability.md). Two shapes of hostile YAML are cheap to write and expensive to read:
//  - deep nesting (10^5 `[` or `- - - ...`): yaml-cpp's parser recurses once per level;
//  - nested aliases (`b: &b [*a, *a, ...]`, `c: &c [*b, *b, ...]`, ...): yaml-cpp shares an
//    aliased node instead of copying it, so the tree is small in memory, but every walk, copy or
//    conversion that follows it sees the expansion, which grows exponentially with the levels.
// Both checks are linear in the text and report NAME:LINE:COLUMN.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rqat::experiment {

// Experiment files nest a handful of levels (stages.qat.args.bits: [2, 3] is 5); yaml-cpp gives up
// at 2000 levels of its own recursion. 128 leaves room for any real file and keeps the parser's
// stack a few hundred kilobytes, also under sanitizers and on small thread stacks.
inline constexpr int kMaxYamlNesting = 128;

// Where a YAML text came from, for messages: a file's name (positions are printed as
// NAME:LINE:COLUMN), or something without lines, like "--set KEY" (printed alone).
struct YamlTextName {
  std::string name;
  bool has_lines = true;
  std::string at(int line, int column) const;  // 1-based
};

// Fails when collections nest deeper than `max_depth`. The depth is estimated from the text
// without parsing it: open flow brackets ([ and { outside quotes and comments) plus the open block
// levels (each deeper indentation, and each `- `, `? ` or `: ` that starts a nested node on its
// line). Runs before yaml-cpp sees the text, so the parser never recurses that far.
void check_yaml_nesting(std::string_view text, const YamlTextName& name,
                        int max_depth = kMaxYamlNesting);

// Fails when the first document, with every alias expanded, has more than `max_nodes` nodes (each
// scalar, null, sequence and mapping counts one), or when an alias names the collection it is
// inside (a tree that contains itself: any walk of it would never end). It reads the parser's
// events and remembers the expanded size of each anchored node, so an alias costs one addition and
// counting stays linear in the text, however large the expansion. YAML syntax errors propagate as
// YAML::ParserException.
void check_yaml_expansion(const std::string& text, const YamlTextName& name, uint64_t max_nodes);

}  // namespace rqat::experiment

#include "experiment/yaml_bounds.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "io/error.h"

namespace rqat::experiment {

std::string YamlTextName::at(int line, int column) const {
  return has_lines ? fmt::format("{}:{}:{}", name, line, column) : name;
}

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// A block scalar header (`|`, `>-`, `|+2`, ...): the lines after it are text, whatever they hold.
bool is_block_scalar_header(std::string_view token) {
  if (token.empty() || (token[0] != '|' && token[0] != '>')) return false;
  return std::all_of(token.begin() + 1, token.end(),
                     [](char c) { return c == '-' || c == '+' || (c >= '1' && c <= '9'); });
}

// The nesting estimate of check_yaml_nesting, one line at a time. State that spans lines: open
// flow brackets, a block scalar's text, and the columns of the open block levels. Quotes are
// taken to end with their line: a quote the estimate opens by mistake then hides one line's
// brackets at most, never the rest of the file, and a real multi-line quote only adds to the
// estimate.
class NestingScanner {
 public:
  NestingScanner(const YamlTextName& name, int max_depth) : name_(name), max_depth_(max_depth) {}

  void line(std::string_view text, int line_number) {
    line_number_ = line_number;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (inside_block_scalar(text)) return;
    size_t pos = 0;
    if (flow_depth_ == 0) {
      const size_t indent = text.find_first_not_of(' ');
      if (indent == std::string_view::npos || text[indent] == '#') return;  // blank or comment
      pos = open_block_levels(text, indent);
      last_ = 0;  // a node may start here
    }
    scan_rest(text, pos);
  }

 private:
  // Lines more indented than the node that holds a block scalar (and blank lines) are its text.
  bool inside_block_scalar(std::string_view text) {
    if (!block_scalar_parent_) return false;
    const size_t indent = text.find_first_not_of(' ');
    if (indent == std::string_view::npos || static_cast<int>(indent) > *block_scalar_parent_)
      return true;
    block_scalar_parent_.reset();
    return false;
  }

  // Closes the block levels the indentation leaves, opens one for a deeper indentation and one
  // for each node that starts after an indicator on this line ("- - x", "- key: v", "? k").
  // Returns where the line's content starts.
  size_t open_block_levels(std::string_view text, size_t indent) {
    const int column = static_cast<int>(indent);
    while (!columns_.empty() && columns_.back() > column) columns_.pop_back();
    if (columns_.empty() || columns_.back() < column) push_column(column);
    size_t pos = indent;
    while (pos < text.size() && (text[pos] == '-' || text[pos] == '?' || text[pos] == ':') &&
           (pos + 1 == text.size() || is_blank(text[pos + 1]))) {
      pos = text.find_first_not_of(" \t", pos + 1);
      if (pos == std::string_view::npos) return text.size();
      if (text[pos] == '#' || text[pos] == '|' || text[pos] == '>') break;
      push_column(static_cast<int>(pos));
    }
    return pos;
  }

  void push_column(int column) {
    columns_.push_back(column);
    check_depth(column);
  }

  void check_depth(size_t at) {
    const size_t depth = columns_.size() + static_cast<size_t>(flow_depth_);
    if (depth > static_cast<size_t>(max_depth_))
      fail("{}: YAML nested deeper than {} levels (experiment files need fewer than 10)",
           name_.at(line_number_, static_cast<int>(at) + 1), max_depth_);
  }

  // Where a quoted scalar, a flow collection or a block scalar may begin: at the start of a block
  // line's content (after its indicators), after `[`, `{` or `,`, or after `: `. Elsewhere a
  // quote or bracket is part of a plain scalar ("it's", "W3 [kd]").
  bool at_node_start(std::string_view text, size_t i) const {
    return last_ == 0 || last_ == '[' || last_ == '{' || last_ == ',' ||
           (last_ == ':' && (i == 0 || is_blank(text[i - 1])));
  }

  // Quotes, comments and flow brackets from `pos` to the end of the line; then, in block
  // context, whether the line ends with a block scalar header.
  void scan_rest(std::string_view text, size_t pos) {
    size_t content_end = text.size();
    std::optional<size_t> header;  // where a block scalar header may start
    for (size_t i = pos; i < text.size(); ++i) {
      const char c = text[i];
      if (quote_ != 0) {
        i += quoted_char(text, i);
        if (quote_ == 0) last_ = c;
        continue;
      }
      if (is_blank(c)) continue;
      if (c == '#' && (i == 0 || is_blank(text[i - 1]))) {
        content_end = i;
        break;
      }
      const bool node_start = at_node_start(text, i);
      if ((c == '"' || c == '\'') && node_start) {
        quote_ = c;
      } else if ((c == '[' || c == '{') && (flow_depth_ > 0 || node_start)) {
        ++flow_depth_;  // flow scalars cannot hold brackets: inside a flow, every one counts
        check_depth(i);
      } else if ((c == ']' || c == '}') && flow_depth_ > 0) {
        --flow_depth_;  // unbalanced text is the parser's to report
      } else if ((c == '|' || c == '>') && node_start && flow_depth_ == 0) {
        header = i;
      }
      last_ = c;
    }
    quote_ = 0;
    if (header) note_block_scalar(text.substr(*header, content_end - *header));
  }

  // Inside a quoted scalar: returns how many extra characters an escape or a doubled quote
  // consumes, and closes the quote at its end.
  size_t quoted_char(std::string_view text, size_t i) {
    const char c = text[i];
    if (quote_ == '"') {
      if (c == '\\') return 1;
      if (c == '"') quote_ = 0;
      return 0;
    }
    if (c != '\'') return 0;
    if (i + 1 < text.size() && text[i + 1] == '\'') return 1;  // '' is a quote inside the text
    quote_ = 0;
    return 0;
  }

  // `token` runs from a possible header to the end of the line's content.
  void note_block_scalar(std::string_view token) {
    const size_t end = token.find_last_not_of(" \t");
    if (end != std::string_view::npos && is_block_scalar_header(token.substr(0, end + 1)))
      block_scalar_parent_ = columns_.empty() ? 0 : columns_.back();
  }

  const YamlTextName& name_;
  const int max_depth_;
  int line_number_ = 0;
  int flow_depth_ = 0;
  char quote_ = 0;  // '"' or '\'' while a quoted scalar is open (within a line)
  char last_ = 0;   // the last character outside quotes and blanks; 0 where a line's content starts
  std::optional<int> block_scalar_parent_;  // column of the node whose block scalar this is
  std::vector<int> columns_;                // columns of the open block levels, increasing
};

// Counts the nodes of the first document as a walk that follows aliases would visit them.
class ExpansionCounter : public YAML::EventHandler {
 public:
  ExpansionCounter(const YamlTextName& name, uint64_t max_nodes)
      : name_(name), max_nodes_(std::min<uint64_t>(max_nodes, kCeiling)) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    leaf(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapEnd() override { close(); }
  void OnAnchor(const YAML::Mark&, const std::string& anchor_name) override {
    pending_name_ = anchor_name;  // the next node's event carries this anchor's id
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const uint64_t size = anchor < sizes_.size() ? sizes_[anchor] : 0;
    if (size == 0)  // registered but not finished: the alias is inside the node it names
      fail("{}: alias *{} is inside the node it names (a structure that contains itself)", at(mark),
           anchor < names_.size() ? names_[anchor] : std::string("?"));
    add(size, mark);
  }

 private:
  // Sizes stay below this, so adding two of them never overflows.
  static constexpr uint64_t kCeiling = std::numeric_limits<uint64_t>::max() / 4;

  struct OpenNode {
    YAML::anchor_t anchor;
    uint64_t count_before;  // nodes counted before this one began
  };

  std::string at(const YAML::Mark& mark) const { return name_.at(mark.line + 1, mark.column + 1); }

  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    const uint64_t before = count_;
    add(1, mark);
    record(anchor, count_ - before);
  }

  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    open_.push_back({anchor, count_});
    record_name(anchor);
    add(1, mark);
  }

  void close() {
    const OpenNode node = open_.back();
    open_.pop_back();
    record(node.anchor, count_ - node.count_before);
  }

  void add(uint64_t nodes, const YAML::Mark& mark) {
    count_ += nodes;
    if (count_ > max_nodes_)
      fail(
          "{}: YAML expands to more than {} nodes with its aliases followed (nested anchors and "
          "aliases multiply); raise --max-yaml-nodes to read it",
          at(mark), max_nodes_);
  }

  // Anchor ids count up from 1 in the order the anchors appear.
  void record_name(YAML::anchor_t anchor) {
    if (anchor == YAML::NullAnchor) return;
    if (names_.size() <= anchor) names_.resize(anchor + 1);
    names_[anchor] = pending_name_;
  }

  void record(YAML::anchor_t anchor, uint64_t size) {
    if (anchor == YAML::NullAnchor) return;
    record_name(anchor);
    if (sizes_.size() <= anchor) sizes_.resize(anchor + 1, 0);
    sizes_[anchor] = size;
  }

  const YamlTextName& name_;
  const uint64_t max_nodes_;
  uint64_t count_ = 0;
  std::vector<OpenNode> open_;
  std::vector<uint64_t> sizes_;     // expanded size of each finished anchored node (0: not yet)
  std::vector<std::string> names_;  // each anchor's name, for messages
  std::string pending_name_;
};

}  // namespace

void check_yaml_nesting(std::string_view text, const YamlTextName& name, int max_depth) {
  NestingScanner scanner(name, max_depth);
  int line_number = 1;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    scanner.line(text.substr(start, end - start), line_number++);
    start = end + 1;
  }
}

void check_yaml_expansion(const std::string& text, const YamlTextName& name, uint64_t max_nodes) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  ExpansionCounter counter(name, max_nodes);
  parser.HandleNextDocument(counter);
}

}  // namespace rqat::experiment

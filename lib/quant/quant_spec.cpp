// See quant_spec.h. Field names in errors and in JSON are the C++ member names, so a message about
// "quant.group_size" points at the same key in a manifest and in a YAML config.
#include "quant/quant_spec.h"

#include <algorithm>

#include <fmt/format.h>

#include "io/error.h"
#include "io/name_pattern.h"
#include "ops/weight_formats.h"
#include "quant/gguf/grid.h"

namespace rqat::quant {

namespace {

// "bits" under "" , "quant.bits" under "quant", "--bits" under "--", "x.bits" under "x.".
std::string field_name(std::string_view where, std::string_view field) {
  if (where.empty()) return std::string(field);
  // Command-line flags spell fields with dashes: --group-size.
  if (where == "--") {
    std::string flag = fmt::format("--{}", field);
    std::replace(flag.begin(), flag.end(), '_', '-');
    return flag;
  }
  const char last = where.back();
  if (last == '.' || last == '-') return fmt::format("{}{}", where, field);
  return fmt::format("{}.{}", where, field);
}

void check_patterns(const std::vector<std::string>& patterns, std::string_view where,
                    std::string_view field) {
  for (std::size_t i = 0; i < patterns.size(); ++i)
    io::NamePattern(patterns[i], fmt::format("{}[{}]", field_name(where, field), i));
}

bool matches_any(const std::vector<std::string>& patterns, std::string_view name) {
  for (const auto& pattern : patterns) {
    if (io::NamePattern(pattern, "quant spec pattern").full_match(name)) return true;
  }
  return false;
}

std::vector<std::string> string_list(const io::Json& value, const std::string& name) {
  if (!value.is_array()) fail("{} must be a list of strings, got {}", name, value.dump());
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string()) fail("{} must be a list of strings, got {}", name, value.dump());
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace

int64_t QuantSpec::num_groups(int64_t in_features) const {
  if (in_features <= 0) return 0;
  const int64_t group = effective_group_size(in_features);
  return (in_features + group - 1) / group;  // the last group may be smaller
}

int64_t QuantSpec::effective_group_size(int64_t in_features) const {
  return group_size == -1 ? in_features : group_size;
}

bool QuantSpec::quantizes(std::string_view module_name) const {
  return matches_any(include, module_name) && !matches_any(exclude, module_name);
}

void QuantSpec::use_gguf_grid(io::GgufType type) {
  const GgufGridInfo grid = gguf_grid_info(type);
  gguf_grid = type;
  fp_grid.reset();
  bits = grid.bits;
  group_size = grid.sub_block;
  symmetric = false;
  clip_search = false;
}

void QuantSpec::use_fp_grid(FpGrid grid) {
  const ops::WeightFormat* format = ops::weight_format(enum_name(grid));
  fp_grid = grid;
  gguf_grid.reset();
  bits = format->bits;
  group_size = format->sub_block == 0 ? -1 : format->sub_block;
  symmetric = true;
  clip_search = false;
}

void QuantSpec::use_grid(std::string_view name, std::string_view where) {
  if (name == kInt4W4a16Preset) {
    bits = 4;
    group_size = 128;
    symmetric = true;
    return;
  }
  for (int g = 0; g < static_cast<int>(FpGrid::kCount); ++g) {
    if (name == enum_name(static_cast<FpGrid>(g))) return use_fp_grid(static_cast<FpGrid>(g));
  }
  if (name.rfind("gguf-", 0) != 0)
    fail("{} = {}: unknown grid (known: {}, {}, {}, {}, gguf-<type>: {})", where, name,
         enum_name(FpGrid::kNvfp4), enum_name(FpGrid::kMxfp4), enum_name(FpGrid::kFp8),
         kInt4W4a16Preset, ops::weight_format_names(ops::WeightGrid::kGguf));
  use_gguf_grid(parse_gguf_grid(name, where));
}

std::optional<std::string> QuantSpec::grid_name() const {
  if (gguf_grid) return gguf_grid_name(*gguf_grid);
  if (fp_grid) return std::string(enum_name(*fp_grid));
  return std::nullopt;
}

void QuantSpec::validate(std::string_view where) const {
  if (const auto grid = grid_name()) {
    // A format's own grid: its bits and groups (and, floating point, symmetric), nothing else.
    if (gguf_grid && fp_grid)
      fail("{}: a GGUF grid and a floating-point grid ({}) at once", field_name(where, "grid"),
           enum_name(*fp_grid));
    const ops::WeightFormat* format = ops::weight_format(*grid);
    if (format == nullptr) fail("{} = {}: unknown grid", field_name(where, "grid"), *grid);
    const int64_t group = format->sub_block == 0 ? -1 : format->sub_block;
    if (bits != format->bits || group_size != group || (fp_grid && !symmetric))
      fail("{} = {} has {}-bit codes in groups of {}{}: {} = {}, {} = {}{} do not match",
           field_name(where, "grid"), *grid, format->bits, group, fp_grid ? ", symmetric" : "",
           field_name(where, "bits"), bits, field_name(where, "group_size"), group_size,
           fp_grid ? fmt::format(" and {} = {}", field_name(where, "symmetric"), symmetric) : "");
    if (per_tensor || clip_search || v1_zeros)
      fail("{} = {}: per_tensor, clip_search and v1_zeros do not apply to a format's grid",
           field_name(where, "grid"), *grid);
    check_patterns(include, where, "include");
    check_patterns(exclude, where, "exclude");
    return;
  }
  if (!ops::integer_bits_supported(bits))
    fail("{} = {}: supported bit widths are {}", field_name(where, "bits"), bits,
         ops::integer_bits_choices());
  if (group_size != -1 && group_size < 1) {
    fail("{} = {}: must be -1 (one group per output row) or a positive number of input columns",
         field_name(where, "group_size"), group_size);
  }
  if (per_tensor && group_size != -1)
    fail("{} = true needs {} = -1 (one scale for the whole weight), got {}",
         field_name(where, "per_tensor"), field_name(where, "group_size"), group_size);
  check_patterns(include, where, "include");
  check_patterns(exclude, where, "exclude");
}

io::Json QuantSpec::to_json() const {
  io::Json json = {{"bits", bits},           {"group_size", group_size},
                   {"symmetric", symmetric}, {"clip_search", clip_search},
                   {"include", include},     {"exclude", exclude}};
  // Written only when set, so the specs of earlier artifacts read back unchanged.
  if (per_tensor) json["per_tensor"] = true;
  if (v1_zeros) json["v1_zeros"] = true;
  if (const auto grid = grid_name()) json["grid"] = *grid;
  if (activations) json["activations"] = enum_name(*activations);
  return json;
}

QuantSpec QuantSpec::from_json(const io::Json& json, std::string_view where) {
  if (!json.is_object())
    fail("{} must be an object with the quantization spec, got {}", where, json.dump());
  QuantSpec spec;
  for (const auto& [key, value] : json.items()) {
    const std::string name = field_name(where, key);
    if (key == "bits") {
      if (!value.is_number_integer()) fail("{} must be an integer, got {}", name, value.dump());
      spec.bits = value.get<int>();
    } else if (key == "group_size") {
      if (!value.is_number_integer()) fail("{} must be an integer, got {}", name, value.dump());
      spec.group_size = value.get<int64_t>();
    } else if (key == "symmetric" || key == "clip_search" || key == "per_tensor" ||
               key == "v1_zeros") {
      if (!value.is_boolean()) fail("{} must be true or false, got {}", name, value.dump());
      bool& field = key == "symmetric"     ? spec.symmetric
                    : key == "clip_search" ? spec.clip_search
                    : key == "per_tensor"  ? spec.per_tensor
                                           : spec.v1_zeros;
      field = value.get<bool>();
    } else if (key == "grid") {
      if (!value.is_string()) fail("{} must be a string, got {}", name, value.dump());
      // The grid's name only; bits and group size come from their own keys (validate checks).
      const std::string grid = value.get<std::string>();
      if (grid == kInt4W4a16Preset) fail("{} = {}: a preset, not a grid of its own", name, grid);
      QuantSpec on_grid;
      on_grid.use_grid(grid, name);
      spec.gguf_grid = on_grid.gguf_grid;
      spec.fp_grid = on_grid.fp_grid;
    } else if (key == "activations") {
      if (!value.is_string()) fail("{} must be a string, got {}", name, value.dump());
      spec.activations = parse_enum<FpGrid>(value.get<std::string>(), name);
    } else if (key == "include" || key == "exclude") {
      (key == "include" ? spec.include : spec.exclude) = string_list(value, name);
    } else {
      fail(
          "{}: unknown key (known: bits, group_size, symmetric, clip_search, per_tensor, "
          "v1_zeros, grid, activations, include, exclude)",
          name);
    }
  }
  spec.validate(where);
  return spec;
}

std::string QuantSpec::describe() const {
  if (activations) {
    QuantSpec weights = *this;
    weights.activations.reset();
    return fmt::format("{}, {} activations", weights.describe(), enum_name(*activations));
  }
  if (fp_grid)
    return fmt::format("{} grid (W{}, blocks of {})", enum_name(*fp_grid), bits,
                       group_size == -1 ? std::string("a row") : std::to_string(group_size));
  if (gguf_grid)
    return fmt::format("{} grid (W{}, groups of {})", gguf_grid_name(*gguf_grid), bits, group_size);
  std::string out = per_tensor         ? fmt::format("W{} per-tensor", bits)
                    : group_size == -1 ? fmt::format("W{} per-channel", bits)
                                       : fmt::format("W{}G{}", bits, group_size);
  out += symmetric ? " sym" : " asym";
  if (clip_search) out += " clip";
  if (v1_zeros && !symmetric) out += " v1-zeros";
  return out;
}

}  // namespace rqat::quant

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
  bits = grid.bits;
  group_size = grid.sub_block;
  symmetric = false;
  clip_search = false;
}

void QuantSpec::validate(std::string_view where) const {
  if (gguf_grid) {
    const GgufGridInfo grid = gguf_grid_info(*gguf_grid, field_name(where, "grid"));
    if (bits != grid.bits || group_size != grid.sub_block)
      fail("{} = {} has {}-bit codes in groups of {}: {} = {} and {} = {} do not match",
           field_name(where, "grid"), gguf_grid_name(*gguf_grid), grid.bits, grid.sub_block,
           field_name(where, "bits"), bits, field_name(where, "group_size"), group_size);
    if (per_tensor || clip_search || v1_zeros)
      fail("{} = {}: per_tensor, clip_search and v1_zeros do not apply to a GGUF grid",
           field_name(where, "grid"), gguf_grid_name(*gguf_grid));
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
  if (gguf_grid) json["grid"] = gguf_grid_name(*gguf_grid);
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
      spec.gguf_grid = parse_gguf_grid(value.get<std::string>(), name);
    } else if (key == "include" || key == "exclude") {
      (key == "include" ? spec.include : spec.exclude) = string_list(value, name);
    } else {
      fail(
          "{}: unknown key (known: bits, group_size, symmetric, clip_search, per_tensor, "
          "v1_zeros, grid, include, exclude)",
          name);
    }
  }
  spec.validate(where);
  return spec;
}

std::string QuantSpec::describe() const {
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

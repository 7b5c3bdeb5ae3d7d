// See scheme.h. The keys and values are those compressed-tensors 0.20.1 serializes
// (QuantizationArgs drops actorder, block_structure, observer and zp_dtype when unset; scale_dtype
// is written for the MX and NV formats as its presets set it).
#include "quant/compressed_tensors/scheme.h"

#include <fmt/format.h>

#include "io/error.h"
#include "io/json_fields.h"

namespace rqat::quant {

namespace {

const char* torch_dtype_string(CtFormat format) {
  switch (format) {
    case CtFormat::kNvfp4PackQuantized:
      return "torch.float8_e4m3fn";
    case CtFormat::kMxfp4PackQuantized:
      return "torch.uint8";
    default:
      return nullptr;
  }
}

}  // namespace

std::optional<FpGrid> CtScheme::fp_grid() const {
  switch (format) {
    case CtFormat::kNvfp4PackQuantized:
      return FpGrid::kNvfp4;
    case CtFormat::kMxfp4PackQuantized:
      return FpGrid::kMxfp4;
    case CtFormat::kFloatQuantized:
      return FpGrid::kFp8;
    default:
      return std::nullopt;
  }
}

std::string_view CtScheme::strategy() const {
  if (format == CtFormat::kNvfp4PackQuantized) return "tensor_group";
  return group_size == -1 ? "channel" : "group";
}

std::string CtScheme::describe() const {
  // The presets' names where the scheme is one ("NVFP4A16", "NVFP4 W4A4"); otherwise the weights
  // and then other activations ("W4 G128 sym, fp8 activations").
  const auto grid = fp_grid();
  const bool own_activations = activations && activations == grid;
  std::string name;
  if (grid == FpGrid::kNvfp4 || grid == FpGrid::kMxfp4) {
    name = fmt::format("{}{}", *grid == FpGrid::kNvfp4 ? "NVFP4" : "MXFP4",
                       own_activations ? " W4A4"
                       : activations   ? ""
                                       : "A16");
  } else if (grid == FpGrid::kFp8) {
    name = own_activations ? "FP8 W8A8 per-channel, dynamic per-token"
           : activations   ? "FP8 W8 per-channel"
                           : "FP8 W8A16 per-channel";
  } else {
    name =
        fmt::format("W{}{} {} {}", bits, activations ? "" : "A16",
                    group_size == -1 ? std::string("per-channel") : fmt::format("G{}", group_size),
                    symmetric ? "sym" : "asym");
  }
  if (activations && !own_activations)
    name += fmt::format(", {} activations", enum_name(*activations));
  return fmt::format("{} ({})", name, enum_name(format));
}

CtScheme ct_scheme_of(const QuantizedWeight& w, bool symmetric, std::optional<FpGrid> activations,
                      const std::string& name) {
  if (w.gguf_grid)
    fail(
        "{}: on the GGUF grid {} (compressed-tensors holds the uniform grid, nvfp4, mxfp4 and fp8)",
        name, enum_name(*w.gguf_grid));
  CtScheme scheme{CtFormat::kPackQuantized, w.bits, w.group_size, symmetric, activations};
  if (w.fp_grid) {
    switch (*w.fp_grid) {
      case FpGrid::kNvfp4:
        scheme = {CtFormat::kNvfp4PackQuantized, 4, 16, true, activations};
        break;
      case FpGrid::kMxfp4:
        scheme = {CtFormat::kMxfp4PackQuantized, 4, 32, true, activations};
        break;
      case FpGrid::kFp8:
      case FpGrid::kCount:
        scheme = {CtFormat::kFloatQuantized, 8, -1, true, activations};
        break;
    }
  }
  return scheme;
}

namespace {

// The input_activations of `grid` as the presets serialize them (FP8_DYNAMIC, NVFP4, MXFP4).
io::Json input_activations_json(FpGrid grid) {
  switch (grid) {
    case FpGrid::kFp8:
      return {{"num_bits", 8},         {"type", "float"},     {"symmetric", true},
              {"group_size", nullptr}, {"strategy", "token"}, {"dynamic", true}};
    case FpGrid::kNvfp4:
      return {{"num_bits", 4},
              {"type", "float"},
              {"symmetric", true},
              {"group_size", 16},
              {"strategy", "tensor_group"},
              {"dynamic", "local"},
              {"scale_dtype", "torch.float8_e4m3fn"},
              {"observer", "static_minmax"}};
    default:
      return {{"num_bits", 4},
              {"type", "float"},
              {"symmetric", true},
              {"group_size", 32},
              {"strategy", "group"},
              {"dynamic", true},
              {"scale_dtype", "torch.uint8"}};
  }
}

// The grid of an input_activations object, or nullopt with `unread` describing it.
std::optional<FpGrid> activations_of(const io::Json& args, std::string& unread) {
  if (args.is_null()) return std::nullopt;
  const auto get = [&](const char* key) { return args.contains(key) ? args[key] : io::Json(); };
  const bool is_float = get("type") == "float";
  const io::Json bits = get("num_bits"), strategy = get("strategy"), dynamic = get("dynamic"),
                 group = get("group_size");
  if (is_float && bits == 8 && strategy == "token" && dynamic == true) return FpGrid::kFp8;
  if (is_float && bits == 4 && strategy == "tensor_group" && group == 16 && dynamic == "local")
    return FpGrid::kNvfp4;
  if (is_float && bits == 4 && strategy == "group" && group == 32 && dynamic == true)
    return FpGrid::kMxfp4;
  unread = args.dump();
  return std::nullopt;
}

}  // namespace

io::Json ct_quantization_config(const CtScheme& scheme, const std::vector<std::string>& ignore) {
  io::Json weights = io::Json::object();
  weights["num_bits"] = scheme.bits;
  weights["type"] = scheme.fp_grid() ? "float" : "int";
  weights["symmetric"] = scheme.symmetric;
  weights["group_size"] = scheme.group_size == -1 ? io::Json(nullptr) : io::Json(scheme.group_size);
  weights["strategy"] = scheme.strategy();
  weights["dynamic"] = false;
  if (const char* dtype = torch_dtype_string(scheme.format)) weights["scale_dtype"] = dtype;
  io::Json group = {
      {"targets", io::Json::array({"Linear"})},
      {"weights", weights},
      {"input_activations",
       scheme.activations ? input_activations_json(*scheme.activations) : io::Json(nullptr)},
      {"output_activations", nullptr},
      {"format", nullptr}};
  io::Json qc = io::Json::object();
  qc["version"] = kCompressedTensorsVersion;
  qc["quant_method"] = "compressed-tensors";
  qc["sparsity_config"] = io::Json::object();
  qc["transform_config"] = io::Json::object();
  qc["config_groups"] = {{"group_0", group}};
  qc["kv_cache_scheme"] = nullptr;
  qc["format"] = enum_name(scheme.format);
  qc["quantization_status"] = "compressed";
  qc["global_compression_ratio"] = nullptr;
  qc["ignore"] = ignore;
  qc["moe_sparsity_config"] = nullptr;
  return qc;
}

CtConfig ct_config_from_json(const io::Json& qc, std::string_view where) {
  const std::string top = fmt::format("{}: quantization_config", where);
  if (!qc.is_object()) fail("{}: expected an object", top);
  const auto method = io::json_field<std::string>(qc, "quant_method", top);
  if (method != "compressed-tensors")
    fail("{}.quant_method: \"{}\" (expected \"compressed-tensors\")", top, method);
  const auto status = io::json_field_or<std::string>(qc, "quantization_status", "compressed", top);
  if (status != "compressed")
    fail(
        "{}.quantization_status: \"{}\" (rqat reads compressed checkpoints; a \"{}\" one holds "
        "dense weights: load it as a full-precision model)",
        top, status, status);
  const std::string groups_path = io::json_path(top, "config_groups");
  const auto groups = io::json_field<io::Json>(qc, "config_groups", top);
  if (!groups.is_object() || groups.size() != 1)
    fail("{}: expected one config group (one scheme for every quantized layer), got {}",
         groups_path, groups.is_object() ? std::to_string(groups.size()) : groups.type_name());
  const std::string gpath = io::json_path(groups_path, groups.begin().key());
  const io::Json& group = groups.begin().value();
  if (!group.is_object()) fail("{}: expected an object", gpath);
  CtConfig config;
  config.targets = io::json_field_or<std::vector<std::string>>(group, "targets", {}, gpath);
  config.ignore = io::json_field_or<std::vector<std::string>>(qc, "ignore", {}, top);
  if (group.contains("input_activations"))
    config.scheme.activations =
        activations_of(group["input_activations"], config.unread_activations);
  const std::string wpath = io::json_path(gpath, "weights");
  const auto weights = io::json_field<io::Json>(group, "weights", gpath);
  if (!weights.is_object()) fail("{}: expected an object (a weight quantization)", wpath);

  std::string format = io::json_field_or<std::string>(group, "format", "", gpath);
  if (format.empty()) format = io::json_field<std::string>(qc, "format", top);
  bool known = false;
  for (int i = 0; i < static_cast<int>(CtFormat::kCount); ++i) {
    if (enum_name(static_cast<CtFormat>(i)) == format) {
      config.scheme.format = static_cast<CtFormat>(i);
      known = true;
    }
  }
  if (!known)
    fail(
        "{}.format: \"{}\" (rqat reads pack-quantized, nvfp4-pack-quantized, "
        "mxfp4-pack-quantized and float-quantized)",
        top, format);

  CtScheme& s = config.scheme;
  s.bits = static_cast<int>(io::json_field<int64_t>(weights, "num_bits", wpath));
  const auto type = io::json_field_or<std::string>(weights, "type", "int", wpath);
  s.symmetric = io::json_field_or<bool>(weights, "symmetric", true, wpath);
  const auto strategy = io::json_field_or<std::string>(weights, "strategy", "", wpath);
  const io::Json group_size = weights.contains("group_size") ? weights["group_size"] : io::Json();
  if (!group_size.is_null() && !group_size.is_number_integer())
    fail("{}: expected an integer or null", io::json_path(wpath, "group_size"));
  s.group_size = group_size.is_null() ? -1 : group_size.get<int64_t>();
  if (weights.contains("dynamic") && weights["dynamic"] != false)
    fail("{}: {} (the weights of a checkpoint are static)", io::json_path(wpath, "dynamic"),
         weights["dynamic"].dump());
  if (weights.contains("block_structure") && !weights["block_structure"].is_null())
    fail("{}: block scales are not supported (rqat's groups lie along a row)",
         io::json_path(wpath, "block_structure"));

  const auto unsupported = [&] {
    fail(
        "{}: {}-bit {} weights, strategy \"{}\", group size {}, {} in format {}: not a scheme "
        "rqat reads (W2-W8 int group/channel pack-quantized, NVFP4, MXFP4, FP8 channel/tensor)",
        wpath, s.bits, type, strategy, s.group_size, s.symmetric ? "symmetric" : "asymmetric",
        format);
  };
  switch (s.format) {
    case CtFormat::kPackQuantized:
      if (type != "int" || s.bits < 1 || s.bits > 8) unsupported();
      if (!(strategy == "group" && s.group_size > 0) &&
          !(strategy == "channel" && s.group_size == -1))
        unsupported();
      break;
    case CtFormat::kNvfp4PackQuantized:
      if (type != "float" || s.bits != 4 || s.group_size != 16 || strategy != "tensor_group" ||
          !s.symmetric)
        unsupported();
      break;
    case CtFormat::kMxfp4PackQuantized:
      if (type != "float" || s.bits != 4 || s.group_size != 32 || strategy != "group" ||
          !s.symmetric)
        unsupported();
      break;
    case CtFormat::kFloatQuantized:
      // A per-tensor FP8 scale is read as the same scale on every row.
      if (type != "float" || s.bits != 8 || !s.symmetric ||
          (strategy != "channel" && strategy != "tensor") || s.group_size > 0)
        unsupported();
      s.group_size = -1;
      break;
    case CtFormat::kCount:
      unsupported();
  }
  return config;
}

}  // namespace rqat::quant

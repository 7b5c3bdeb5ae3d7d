// See importance.h.
#include "quant/gguf/importance.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string_view>

#include "io/error.h"
#include "io/gguf_file.h"
#include "quant/gguf/blocks.h"
#include "quant/gguf/names.h"

namespace rqat::quant {

at::Tensor LayerImportance::weights() const {
  if (count <= 0) return at::ones_like(in_sum2, at::kFloat);
  return in_sum2.to(at::kCPU, at::kFloat) / static_cast<float>(count);
}

LayerImportance importance_from_hessian(const at::Tensor& hessian, int64_t tokens) {
  if (!hessian.defined() || hessian.dim() != 2 || hessian.size(0) != hessian.size(1))
    fail("imatrix: a square Hessian, got {}",
         hessian.defined() ? c10::str(hessian.sizes()) : "none");
  LayerImportance importance;
  importance.count = tokens;
  importance.in_sum2 =
      (hessian.diagonal().to(at::kCPU, at::kDouble) * (0.5 * tokens)).to(at::kFloat);
  return importance;
}

std::map<std::string, LayerImportance> by_gguf_name(
    const std::map<std::string, LayerImportance>& layers) {
  std::map<std::string, LayerImportance> out;
  for (const auto& [layer, importance] : layers) {
    const std::string name = gguf_tensor_name(layer + ".weight");
    if (name.empty()) fail("imatrix: layer {} has no GGUF tensor name", layer);
    out.emplace(name, importance);
  }
  return out;
}

void write_gguf_imatrix(const std::filesystem::path& path,
                        const std::map<std::string, LayerImportance>& layers,
                        const ImatrixSource& source) {
  io::GgufWriter writer;
  writer.add("general.type", std::string("imatrix"));
  writer.add("imatrix.datasets", std::vector<std::string>{source.dataset});
  writer.add("imatrix.chunk_count", static_cast<uint32_t>(source.chunk_count));
  writer.add("imatrix.chunk_size", static_cast<uint32_t>(source.chunk_size));
  for (const auto& [name, importance] : by_gguf_name(layers)) {
    const auto sums = importance.in_sum2.to(at::kCPU, at::kFloat).contiguous();
    // One matrix per tensor (ne1 = 1: llama.cpp's experts would be more).
    writer.add_tensor({name + ".in_sum2",
                       {1, sums.numel()},
                       io::GgufType::kF32,
                       quantize_gguf_tensor(io::GgufType::kF32, sums.reshape({1, -1}))});
    writer.add_tensor(
        {name + ".counts",
         {1, 1},
         io::GgufType::kF32,
         quantize_gguf_tensor(io::GgufType::kF32,
                              at::full({1, 1}, static_cast<float>(importance.count)))});
  }
  writer.write(path);
}

namespace {

// A float32 tensor of the file as a CPU tensor of its shape.
at::Tensor float_tensor(const io::GgufTensor& t, const std::filesystem::path& path) {
  if (t.type != io::GgufType::kF32)
    fail("{}: imatrix tensor {} is {}, not f32", path.string(), t.name, enum_name(t.type));
  return dequantize_gguf_tensor(io::GgufType::kF32, t.data, t.shape);
}

}  // namespace

std::map<std::string, LayerImportance> read_gguf_imatrix(const std::filesystem::path& path) {
  const io::GgufContents file = io::read_gguf(path);
  std::map<std::string, at::Tensor> sums, counts;
  for (const auto& t : file.tensors) {
    constexpr std::string_view kSums = ".in_sum2", kCounts = ".counts";
    const std::string_view name = t.name;
    if (name.ends_with(kSums))
      sums.emplace(name.substr(0, name.size() - kSums.size()), float_tensor(t, path));
    else if (name.ends_with(kCounts))
      counts.emplace(name.substr(0, name.size() - kCounts.size()), float_tensor(t, path));
  }
  if (sums.empty())
    fail(
        "{}: no <tensor>.in_sum2 tensors: not an imatrix in llama.cpp's GGUF format "
        "(llama-imatrix --output-format gguf)",
        path.string());
  std::map<std::string, LayerImportance> out;
  for (auto& [name, sum] : sums) {
    const auto found = counts.find(name);
    if (found == counts.end()) fail("{}: {}.in_sum2 has no {}.counts", path.string(), name, name);
    if (sum.dim() > 2 || (sum.dim() == 2 && sum.size(0) != 1) || found->second.numel() != 1)
      fail("{}: {} holds {} matrices (experts?); rqat reads one per tensor", path.string(), name,
           found->second.numel());
    const double count = found->second.item<double>();
    if (!(count >= 0) || count != std::floor(count))
      fail("{}: {}.counts is {}, not a token count", path.string(), name, count);
    if (!at::isfinite(sum).all().item<bool>() || (sum < 0).any().item<bool>())
      fail("{}: {}.in_sum2 holds negative or non-finite values", path.string(), name);
    out.emplace(name, LayerImportance{sum.reshape({-1}), static_cast<int64_t>(count)});
  }
  return out;
}

}  // namespace rqat::quant

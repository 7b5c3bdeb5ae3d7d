// The tensors of one quantized layer NAME in a compressed-tensors checkpoint (scheme.h), from a
// QuantizedWeight and back, with nothing rounded:
//   pack-quantized        NAME.weight_packed int32 (out, ceil(in * bits / 32)): each row's values
//                         densely packed (element i at bit i * bits, low bits first, crossing word
//                         boundaries), stored as the signed value + 2^(bits-1), which is rqat's
//                         code; NAME.weight_scale (out, groups) in the checkpoint's dtype;
//                         NAME.weight_shape int64 {out, in}; asymmetric only:
//                         NAME.weight_zero_point int32 (ceil(out * bits / 32), groups), the zero
//                         points (zero - 2^(bits-1) signed, so rqat's zero once offset) packed the
//                         same way down each column. Symmetric means zero point 2^(bits-1) on
//                         rqat's side.
//   nvfp4-pack-quantized  NAME.weight_packed uint8 (out, in / 2): E2M1 codes, the even column in
//                         the low nibble; NAME.weight_scale float8_e4m3fn (out, in / 16);
//                         NAME.weight_global_scale float32 {1}: rqat's global scale (448 * 6 /
//                         amax), which compressed-tensors divides the block scales by.
//   mxfp4-pack-quantized  NAME.weight_packed as nvfp4; NAME.weight_scale uint8 (out, in / 32): the
//                         E8M0 byte log2(scale) + 127.
//   float-quantized       NAME.weight float8_e4m3fn (out, in); NAME.weight_scale float32 (out, 1)
//                         (read: any float dtype, or one per-tensor scale).
// compressed-tensors dequantizes them as (q - zp) * scale, value * (scale / global), value * scale:
// the operations of QuantizedWeight::dequantize in the same order.
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <string>
#include <string_view>

#include "quant/compressed_tensors/scheme.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// By suffix ("weight_packed", "weight_scale", ...).
using CtLayerTensors = std::map<std::string, at::Tensor>;

// Fails naming `name` for what the scheme cannot hold exactly: a layer of another scheme (or
// invalid), act-order (g_idx not c / group_size; compressed-tensors 0.20 has no g_idx), a row that
// is not whole groups (compressed-tensors refuses partial groups), a symmetric scheme's zero point
// that is not 2^(bits-1).
void ct_check_layer(const QuantizedWeight& w, const CtScheme& scheme, const std::string& name);

// The layer's tensors (after ct_check_layer); `scale_dtype` is the checkpoint's dtype, which
// pack-quantized scales are stored in: also refused, a scale that is not a scale_dtype value (int),
// not E4M3 (nvfp4) or outside E8M0 (mxfp4).
CtLayerTensors ct_layer_tensors(const QuantizedWeight& w, const CtScheme& scheme,
                                at::ScalarType scale_dtype, const std::string& name);

// The layer back from its tensors (as stored: any scale dtype that holds the values), validated.
// Errors name `where` (the checkpoint) and the tensor (NAME.weight_scale ...).
QuantizedWeight ct_layer_from_tensors(const CtLayerTensors& parts, const CtScheme& scheme,
                                      std::string_view where, const std::string& name);

// The weight compressed-tensors' decompression computes from the tensors, evaluated in float32
// (the export's exactness check). compressed-tensors itself computes int layers in the scales'
// dtype (float32 scales: this weight; bf16/fp16 ones: it rounded once to that dtype) and returns
// nvfp4 and mxfp4 in bf16 (this weight rounded to bf16; mxfp4's is exact there).
at::Tensor ct_dequantize(const CtLayerTensors& parts, const CtScheme& scheme,
                         std::string_view where, const std::string& name);

}  // namespace rqat::quant

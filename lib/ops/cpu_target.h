// Which instruction set rqat's CPU kernels with per-target code run (the packed low-bit matmul,
// float and int8 activations): the best this CPU supports, or one forced with $RQAT_CPU_TARGET
// (avx512, avx2 or baseline) or set_cpu_target, so that a test or a benchmark can run each target
// the CPU has, and a user can compare them. x86-64 only, GCC builds (elsewhere: baseline, the
// portable vector code, which is NEON on aarch64):
//   avx512    x86-64-v4 (AVX-512 F/BW/CD/DQ/VL): 16-lane decodes through one permute of a table;
//   avx2      x86-64-v3 (AVX2, FMA, F16C, BMI2): decodes by integer-to-float conversion (AVX2
//             has no 16-entry float permute: GCC would look a table up one lane at a time);
//   baseline  the library's own target (SSE2 on x86-64): 2-4-bit codes in 4-lane vectors, decoded
//             by masks and conversions, for float and int8 activations and the weight tiles
//             (ops/low_bit_matmul_narrow_kernel.h).
// The attention kernels pick their clone through GCC's target_clones instead (no forcing).
#pragma once

#include <optional>
#include <string>

#include "io/enum_names.h"

namespace rqat::ops {

enum class CpuTarget { kBaseline, kAvx2, kAvx512, kCount };  // in order of width
constexpr EnumNames<CpuTarget> enum_names(CpuTarget) { return {"baseline", "avx2", "avx512"}; }

// Whether this CPU runs `target` and this build has code for it.
bool cpu_target_supported(CpuTarget target);
// The widest supported target.
CpuTarget best_cpu_target();
// The target the kernels run: set_cpu_target's, else $RQAT_CPU_TARGET's (read once; an unknown or
// unsupported name fails naming the variable), else best_cpu_target().
CpuTarget cpu_target();
// Forces `target` (nullopt: back to the environment's or the best); rqat::Error when unsupported.
void set_cpu_target(std::optional<CpuTarget> target);
// "avx512 (supported: avx512, avx2, baseline)" for reports.
std::string cpu_target_description();

}  // namespace rqat::ops

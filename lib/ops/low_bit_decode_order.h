// The order and scale in which the float-activation kernels of AVX2 and the baseline target read
// codes without per-lane shifts (ops/low_bit_matmul_avx2_kernel.h, low_bit_matmul_narrow_kernel.h),
// and the copy of x in that order which they multiply the codes with. Codes are masked in place in
// their words, so a code arrives as an integer times a power of two, converts to float exactly,
// and meets its x value divided by that power of two, at most 2^22 (an exact division: only a value
// below 2^-104 can become subnormal and lose bits, a change far under any tolerance); each product
// is then the code times x.
// The packed layout is ops/low_bit_weight.h's, a block of 32 codes in `bits` words.
//
// 4 bits (AVX2 and baseline): code c sits in word 2 (c / 16) + c % 2, nibble (c % 16) / 2. "Quad"
// q (0-7) of a block is nibble q of its four words, one code per 32-bit lane, masked in place
// (quads 6 and 7 after one shift of all words by 8 bits: nibble 7 in place would be a negative
// int32). The AVX2 kernel takes two quads per 8-lane vector (its "eighth" e is quads 2e and
// 2e + 1), the baseline one quad per 4-lane vector.
//
// 2 and 3 bits (baseline only): code c's low two bits sit in word c / 16 at bit 2 (c % 16), its
// third bit (3 bits) at bit c of word 2. Quad q is codes 4q .. 4q + 3 in order: their low bits
// masked in place (the last quad of each word after a shift by 8 bits, for the same sign reason),
// the third bit likewise (quads 4-7 after a shift of word 2 by 16) and brought to its place by a
// multiplication with a power of two.
#pragma once

#include <algorithm>

#include "ops/low_bit_matmul_kernel.h"

namespace rqat::ops {

// 4 bits: the bit position at which quad q's masking leaves its codes (the same for every lane).
constexpr int nibble_shift(int quad) { return 4 * quad - (quad >= 6 ? 8 : 0); }

// 4 bits: which of a block's 32 codes quad q's lane l holds: nibble q of word l.
constexpr int nibble_code(int quad, int lane) { return 16 * (lane / 2) + 2 * quad + lane % 2; }

// 2 and 3 bits: the bit position at which code c (0-31) of a block arrives.
constexpr int low_bits_shift(int code) { return 8 * std::min((code % 16) / 4, 2) + 2 * (code % 4); }

// Value i (0-31) of a block in decode order: the code whose x it holds, and the power of two that
// x is multiplied by (4 bits: code nibble_code(i / 4, i % 4), 2^-nibble_shift(i / 4); 2 and 3 bits:
// code i, 2^-low_bits_shift(i)).
struct DecodeSlot {
  int code;
  float factor;
};
DecodeSlot decode_slot(int bits, int i);

// args.x (batch, x_stride) into `out` (same size) in the order and scale above: 4 bits, value
// 4q + l of each block of 32 is x[nibble_code(q, l)] / 2^nibble_shift(q); 2 and 3 bits, value c is
// x[c] / 2^low_bits_shift(c).
void low_bit_x_in_decode_order(const LowBitKernelArgs& args, float* out);

}  // namespace rqat::ops

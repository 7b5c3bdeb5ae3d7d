#!/usr/bin/env bash
# The baseline target's packed low-bit kernel on another architecture: narrow_kernel_check.cpp with
# the kernel's own sources (no LibTorch), built and run natively (x86-64: SSE2), then built for
# aarch64 with Debian's cross compiler and run under qemu-user, where its 4-lane vectors are NEON
# registers. No aarch64 machine is at hand to time it; this checks that the source builds there,
# that GCC makes NEON of it, and that its results hold.
# Usage: run.sh SOURCE_DIR WORK_DIR NATIVE_CXX FMT_INCLUDE_DIR
# Exit 77 (CTest: skipped) when the cross compiler or qemu is absent (scripts/test installs both).
set -euo pipefail
src=$1 work=$2 native_cxx=$3 fmt_include=$4
mkdir -p "$work"
sources=("$src/tests/cross_arch/narrow_kernel_check.cpp"
         "$src/lib/ops/low_bit_matmul_narrow_kernel.cpp"
         "$src/lib/ops/low_bit_decode_order.cpp")
# The library's Release flags; fmt header-only, so nothing needs linking from the target's libs.
flags=(-std=c++20 -O3 -DNDEBUG -Wall -Wextra -Wno-psabi -I"$src/lib" -I"$fmt_include" -DFMT_HEADER_ONLY)

"$native_cxx" "${flags[@]}" "${sources[@]}" -o "$work/narrow_kernel_check_native"
"$work/narrow_kernel_check_native"

cross_cxx=${RQAT_AARCH64_CXX:-aarch64-linux-gnu-g++}
objdump=${RQAT_AARCH64_OBJDUMP:-aarch64-linux-gnu-objdump}
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
if ! command -v "$cross_cxx" >/dev/null || ! command -v "$objdump" >/dev/null || [ -z "$qemu" ]; then
  echo "SKIPPED: aarch64 needs $cross_cxx and qemu-aarch64 (Debian: g++-aarch64-linux-gnu qemu-user; scripts/test installs them)"
  exit 77
fi
# The kernel compiled once: its object is inspected, then linked (static: qemu then needs no
# aarch64 libraries at run time).
"$cross_cxx" "${flags[@]}" -c "${sources[1]}" -o "$work/narrow_kernel_aarch64.o"
"$cross_cxx" "${flags[@]}" -static "${sources[0]}" "$work/narrow_kernel_aarch64.o" "${sources[2]}" \
  -o "$work/narrow_kernel_check_aarch64"
# GCC's vector extensions must have become NEON: 4-lane multiply-adds (fmla vN.4s) in the kernel.
neon=$("$objdump" -d "$work/narrow_kernel_aarch64.o" | grep -cE $'\tfmla\tv[0-9]+\\.4s' || true)
if ((neon == 0)); then
  echo "FAILED: the aarch64 kernel has no NEON 4-lane multiply-adds (fmla vN.4s): GCC left it scalar" >&2
  exit 1
fi
echo "aarch64: $neon NEON multiply-adds (fmla vN.4s) in the kernel"
"$qemu" "$work/narrow_kernel_check_aarch64"

// Device-side helpers shared by the CUDA variants: storage <-> compute type conversion, the
// status string every CUDA variant exports, and grid sizing; dtype dispatch in wb_dispatch.h.
//
// 16-bit values are converted with the PTX cvt instructions directly rather than through
// cuda_fp16.h / cuda_bf16.h: those headers add ~0.3 s to every nvcc run, a fifth of the
// edit-rebuild loop, and the kernels need nothing from them but these conversions.
#pragma once

#include <cuda_runtime.h>

#include "wb_dispatch.h"

__device__ __forceinline__ float wb_to_acc(float v) { return v; }
__device__ __forceinline__ double wb_to_acc(double v) { return v; }
__device__ __forceinline__ float wb_to_acc(wb_half_t v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float wb_to_acc(wb_bf16_t v) {
  return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
}

template <typename T> __device__ __forceinline__ T wb_from_acc(wb_acc_t<T> v);
template <> __device__ __forceinline__ float wb_from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double wb_from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ wb_half_t wb_from_acc<wb_half_t>(float v) {
  wb_half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
template <> __device__ __forceinline__ wb_bf16_t wb_from_acc<wb_bf16_t>(float v) {
  wb_bf16_t b;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(v));
#else  // round to nearest even by hand; NaN stays a (quiet) NaN
  const unsigned u = __float_as_uint(v);
  b.bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<unsigned short>((u >> 16) | 0x40u)
                                           : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return b;
}

static const char* wb_cuda_status_string(int status) {
  const char* words = wb_status_words(status);
  return words ? words : cudaGetErrorString(static_cast<cudaError_t>(status));
}

// The status of the launch just made: a launch-configuration error, or WB_OK.
static inline int wb_launch_status() { return static_cast<int>(cudaGetLastError()); }

static inline int64_t wb_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// V consecutive elements of T moved as one access: 16 bytes (LDG.E.128 / STG.E.128) when
// sizeof(T) * V == 16 and the address is 16-byte aligned, plain scalar accesses when V == 1.
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "wb_cuda.h"

template <typename T, int V>
struct alignas(sizeof(T) * V) WbVec {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ WbVec<T, V> wb_load(const T* p) {
  return *reinterpret_cast<const WbVec<T, V>*>(p);
}

// The same load through the read-only (non-coherent) path, LDG.E.128.CONSTANT: what nvcc emits by
// itself for a `const T* __restrict__` kernel parameter, for kernels that take their pointers in
// a struct (where __restrict__ is not honoured). Only for memory the kernel never writes.
template <typename T, int V>
__device__ __forceinline__ WbVec<T, V> wb_load_readonly(const T* p) {
  constexpr int kBytes = sizeof(T) * V;
  static_assert(kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16, "2, 4, 8 or 16 bytes per access");
  // The register type of the access: float's and double's own (as the compiler picks for them), else bits.
  using R = std::conditional_t<
      std::is_same_v<T, float>, std::conditional_t<V == 1, float, std::conditional_t<V == 2, float2, float4>>,
      std::conditional_t<std::is_same_v<T, double>, std::conditional_t<V == 1, double, double2>,
                         std::conditional_t<kBytes == 2, unsigned short,
                                            std::conditional_t<kBytes == 4, unsigned, std::conditional_t<kBytes == 8, uint2, uint4>>>>>;
  const R bits = __ldg(reinterpret_cast<const R*>(p));
  WbVec<T, V> out;
  memcpy(&out, &bits, kBytes);
  return out;
}

template <typename T, int V>
__device__ __forceinline__ void wb_store(T* p, const WbVec<T, V>& value) {
  *reinterpret_cast<WbVec<T, V>*>(p) = value;
}

inline bool wb_aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

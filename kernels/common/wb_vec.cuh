// V consecutive elements of T moved as one access: 16 bytes (LDG.E.128 / STG.E.128) when
// sizeof(T) * V == 16 and the address is 16-byte aligned, plain scalar accesses when V == 1.
#pragma once

#include <stdint.h>

#include "wb_cuda.h"

template <typename T, int V>
struct alignas(sizeof(T) * V) WbVec {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ WbVec<T, V> wb_load(const T* p) {
  return *reinterpret_cast<const WbVec<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void wb_store(T* p, const WbVec<T, V>& value) {
  *reinterpret_cast<WbVec<T, V>*>(p) = value;
}

inline bool wb_aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

// reduce_sum's backward, shared by every CUDA variant: dx[r, j] = dy[r]. It reads rows values and
// writes rows * n, so it is a pure write stream; V elements (16 bytes) per store where n is a
// multiple of V and dx is 16-byte aligned, else V = 1 (same kernel, scalar stores).
#pragma once

#include "reduce_sum.h"
#include "wb_vec.cuh"

namespace reduce_sum {

constexpr int kBroadcastThreads = 256;

template <typename T, int V>
__global__ void __launch_bounds__(kBroadcastThreads) broadcast_kernel(const T* __restrict__ dy, T* __restrict__ dx,
                                                                      int64_t nvec, int64_t row_vecs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBroadcastThreads + threadIdx.x;
  if (i >= nvec) return;
  const T g = dy[i / row_vecs];
  WbVec<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = g;
  wb_store<T, V>(dx + i * V, out);
}

template <typename T, int V>
int broadcast(const WbReduceSumBackward* a, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T* dy = static_cast<const T*>(a->dy);
  T* dx = static_cast<T*>(a->dx);
  const bool vec = V > 1 && a->n % V == 0 && wb_aligned(dx, sizeof(T) * V);
  const int64_t nvec = a->rows * a->n / (vec ? V : 1);
  const unsigned blocks = static_cast<unsigned>(wb_ceil_div(nvec, kBroadcastThreads));
  if (vec)
    broadcast_kernel<T, V><<<blocks, kBroadcastThreads, 0, stream>>>(dy, dx, nvec, a->n / V);
  else
    broadcast_kernel<T, 1><<<blocks, kBroadcastThreads, 0, stream>>>(dy, dx, nvec, a->n);
  return wb_launch_status();
}

}  // namespace reduce_sum

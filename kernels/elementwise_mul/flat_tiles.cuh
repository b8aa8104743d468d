// The vectorized elementwise_mul kernels, shared by vec4.cu (float, V = 4) and half.cu (half and
// bfloat16, V = 8): a flat one-shot grid over the tensor seen as n elements.
//
// Each block owns a contiguous chunk of kThreads * kUnroll vectors of V elements; thread t takes
// vectors t, t + kThreads, ... of it, so a warp's accesses are 32 adjacent 16-byte vectors (512
// coalesced bytes) and every load of the thread is in flight before its first multiply. The grid
// is one-shot (a block per chunk, no loop): many short blocks keep every SM's loads in flight. With no
// reduction and no reuse there is nothing to tile but the memory stream itself; arithmetic is in
// float (one multiply per element), rounded once on the store.
// Route: the last n % V elements go through the same kernel with V = 1 in a one-block launch; a
// pointer that is not 16-byte aligned (a view with a storage offset) sends the whole call there.
#pragma once

#include <stdint.h>

#include "elementwise_mul.h"
#include "wb_vec.cuh"

namespace elementwise_mul_tiles {

// One vector per thread: the probe (scripts/probe_bandwidth.cu, H100) found 1, 2, 4 or 8 vectors
// per thread within 0.3% of one another (102.0% of the copy bandwidth at 1 for the forward, which
// moves 2 reads to 1 write), a grid-stride loop 5% slower, and streaming loads (__ldcs) 3% slower.
constexpr int kThreads = 256;
constexpr int kUnroll = 1;

// y = a * b over nvec vectors.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                           T* __restrict__ y, int64_t nvec) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  WbVec<T, V> va[kUnroll], vb[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < nvec) {
      va[u] = wb_load<T, V>(a + i * V);
      vb[u] = wb_load<T, V>(b + i * V);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < nvec) {
      WbVec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = wb_from_acc<T>(wb_to_acc(va[u].v[j]) * wb_to_acc(vb[u].v[j]));
      wb_store<T, V>(y + i * V, out);
    }
  }
}

// da = dy * b, db = dy * a over nvec vectors: three streams in, two out, in one pass.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* __restrict__ dy, const T* __restrict__ a,
                                                            const T* __restrict__ b, T* __restrict__ da,
                                                            T* __restrict__ db, int64_t nvec) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  WbVec<T, V> vg[kUnroll], va[kUnroll], vb[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < nvec) {
      vg[u] = wb_load<T, V>(dy + i * V);
      va[u] = wb_load<T, V>(a + i * V);
      vb[u] = wb_load<T, V>(b + i * V);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < nvec) {
      WbVec<T, V> oa, ob;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float g = wb_to_acc(vg[u].v[j]);
        oa.v[j] = wb_from_acc<T>(g * wb_to_acc(vb[u].v[j]));
        ob.v[j] = wb_from_acc<T>(g * wb_to_acc(va[u].v[j]));
      }
      wb_store<T, V>(da + i * V, oa);
      wb_store<T, V>(db + i * V, ob);
    }
  }
}

inline unsigned blocks_for(int64_t nvec) {
  return static_cast<unsigned>(wb_ceil_div(nvec, static_cast<int64_t>(kThreads) * kUnroll));
}

template <typename T, int V>
int forward(const WbElementwiseMulForward* p, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T* a = static_cast<const T*>(p->a);
  const T* b = static_cast<const T*>(p->b);
  T* y = static_cast<T*>(p->y);
  constexpr unsigned kBytes = sizeof(T) * V;
  const bool vector = wb_aligned(a, kBytes) && wb_aligned(b, kBytes) && wb_aligned(y, kBytes);
  const int64_t nvec = vector ? p->n / V : 0, done = nvec * V;
  if (nvec) forward_kernel<T, V><<<blocks_for(nvec), kThreads, 0, stream>>>(a, b, y, nvec);
  if (p->n > done)
    forward_kernel<T, 1><<<blocks_for(p->n - done), kThreads, 0, stream>>>(a + done, b + done, y + done, p->n - done);
  return wb_launch_status();
}

template <typename T, int V>
int backward(const WbElementwiseMulBackward* p, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T* dy = static_cast<const T*>(p->dy);
  const T* a = static_cast<const T*>(p->a);
  const T* b = static_cast<const T*>(p->b);
  T* da = static_cast<T*>(p->da);
  T* db = static_cast<T*>(p->db);
  constexpr unsigned kBytes = sizeof(T) * V;
  const bool vector = wb_aligned(dy, kBytes) && wb_aligned(a, kBytes) && wb_aligned(b, kBytes) &&
                      wb_aligned(da, kBytes) && wb_aligned(db, kBytes);
  const int64_t nvec = vector ? p->n / V : 0, done = nvec * V;
  if (nvec) backward_kernel<T, V><<<blocks_for(nvec), kThreads, 0, stream>>>(dy, a, b, da, db, nvec);
  if (p->n > done)
    backward_kernel<T, 1><<<blocks_for(p->n - done), kThreads, 0, stream>>>(dy + done, a + done, b + done, da + done,
                                                                            db + done, p->n - done);
  return wb_launch_status();
}

}  // namespace elementwise_mul_tiles

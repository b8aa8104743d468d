// The looped route of rmsnorm: a block of 512 threads per row walks the row in V-wide accesses,
// twice (x is read again to normalise: the second read mostly from L2 for rows of a few KB), for
// any row length and any alignment (V = 16 bytes' worth where the row and pointers allow, else 1).
// The backward saves rstd per row and sums dweight by column tiles (dweight.cuh). The vectorized
// rung takes this route for rows too long for registers and for unaligned views; exercise 05's
// starter uses its backward as given.
#pragma once

#include "dweight.cuh"
#include "rmsnorm.h"
#include "wb_row.cuh"

namespace rmsnorm {

constexpr int kLoopThreads = 512;

using wb_row::grid_cap;

template <typename T, int V>
__global__ void __launch_bounds__(kLoopThreads) forward_loop_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                    T* __restrict__ y, int64_t rows, int64_t h,
                                                                    float inv_h, float eps) {
  __shared__ float shared[32];
  const int64_t nv = h / V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * h;
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < nv; i += kLoopThreads) {
      const WbVec<T, V> xv = wb_load<T, V>(xr + i * V);
#pragma unroll
      for (int j = 0; j < V; ++j) ss += wb_to_acc(xv.v[j]) * wb_to_acc(xv.v[j]);
    }
    const float rstd = rsqrtf(wb_reduce::block_allsum(ss, shared) * inv_h + eps);
    for (int64_t i = threadIdx.x; i < nv; i += kLoopThreads) {
      const WbVec<T, V> xv = wb_load<T, V>(xr + i * V), wv = wb_load<T, V>(w + i * V);
      WbVec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = wb_from_acc<T>(wb_to_acc(xv.v[j]) * rstd * wb_to_acc(wv.v[j]));
      wb_store<T, V>(y + row * h + i * V, out);
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kLoopThreads) backward_loop_kernel(const T* __restrict__ dy,
                                                                     const T* __restrict__ x,
                                                                     const T* __restrict__ w, T* __restrict__ dx,
                                                                     float* __restrict__ rstd_out, int64_t rows,
                                                                     int64_t h, float inv_h, float eps) {
  __shared__ WbSum2<float> shared[32];
  const int64_t nv = h / V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *xr = x + row * h, *dyr = dy + row * h;
    WbSum2<float> s{0.f, 0.f};
    for (int64_t i = threadIdx.x; i < nv; i += kLoopThreads) {
      const WbVec<T, V> xv = wb_load<T, V>(xr + i * V), gv = wb_load<T, V>(dyr + i * V),
                        wv = wb_load<T, V>(w + i * V);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xf = wb_to_acc(xv.v[j]);
        s.a += xf * xf;
        s.b += wb_to_acc(gv.v[j]) * wb_to_acc(wv.v[j]) * xf;
      }
    }
    s = wb_reduce::block_allsum(s, shared);
    const float rstd = rsqrtf(s.a * inv_h + eps);
    const float coef = rstd * rstd * rstd * s.b * inv_h;
    for (int64_t i = threadIdx.x; i < nv; i += kLoopThreads) {
      const WbVec<T, V> xv = wb_load<T, V>(xr + i * V), gv = wb_load<T, V>(dyr + i * V),
                        wv = wb_load<T, V>(w + i * V);
      WbVec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j)
        out.v[j] = wb_from_acc<T>(rstd * wb_to_acc(gv.v[j]) * wb_to_acc(wv.v[j]) - wb_to_acc(xv.v[j]) * coef);
      wb_store<T, V>(dx + row * h + i * V, out);
    }
    if (threadIdx.x == 0) rstd_out[row] = rstd;
  }
}

template <typename T>
int looped_forward(const WbRmsnormForward* a, const WbLaunch* l) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T *x = static_cast<const T*>(a->x), *w = static_cast<const T*>(a->weight);
  T* y = static_cast<T*>(a->y);
  const float inv_h = 1.f / static_cast<float>(a->h), eps = static_cast<float>(a->eps);
  if (wb_row_tiles::vector_width<T, V>(a->h, {x, w, y}) == V)
    forward_loop_kernel<T, V><<<grid_cap(a->rows), kLoopThreads, 0, stream>>>(x, w, y, a->rows, a->h, inv_h, eps);
  else
    forward_loop_kernel<T, 1><<<grid_cap(a->rows), kLoopThreads, 0, stream>>>(x, w, y, a->rows, a->h, inv_h, eps);
  return wb_launch_status();
}

// Scratch for looped_backward: rstd per row and the dweight partials.
inline size_t looped_workspace_bytes(int64_t rows, int64_t h, const WbLaunch* l) {
  return dweight_workspace_bytes<float>(rows, h, l->num_sms);
}

template <typename T>
int looped_backward(const WbRmsnormBackward* a, const WbLaunch* l) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T *dy = static_cast<const T*>(a->dy), *x = static_cast<const T*>(a->x), *w = static_cast<const T*>(a->weight);
  T* dx = static_cast<T*>(a->dx);
  const float inv_h = 1.f / static_cast<float>(a->h), eps = static_cast<float>(a->eps);
  float* rstd = static_cast<float*>(a->workspace);
  if (wb_row_tiles::vector_width<T, V>(a->h, {dy, x, w, dx}) == V)
    backward_loop_kernel<T, V><<<grid_cap(a->rows), kLoopThreads, 0, stream>>>(dy, x, w, dx, rstd, a->rows, a->h,
                                                                               inv_h, eps);
  else
    backward_loop_kernel<T, 1><<<grid_cap(a->rows), kLoopThreads, 0, stream>>>(dy, x, w, dx, rstd, a->rows, a->h,
                                                                               inv_h, eps);
  const int status = wb_launch_status();
  if (status != WB_OK) return status;
  return dweight_from_rstd<T, float>(dy, x, static_cast<T*>(a->dweight), a->workspace, a->rows, a->h, l);
}

}  // namespace rmsnorm

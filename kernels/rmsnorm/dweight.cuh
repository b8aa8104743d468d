// dweight[c] = sum over the rows of dy[r, c] * x[r, c] * rstd[r], from the per-row rstd a row kernel
// saved: the scalar rung's backward, and the vectorized rung's route for rows that do not fit in
// registers (or are not 16-byte aligned). Column tiles of 256 threads walk a slice of the rows each
// (coalesced reads of dy and x); each (slice, column) writes one partial sum in A, and
// wb_row_tiles::sum_slices adds the slices in a fixed order: deterministic, no atomics.
#pragma once

#include "wb_row_tiles.cuh"

namespace rmsnorm {

constexpr int kDweightThreads = 256;

struct DweightPlan {
  int64_t slices, rows_per_slice;
  dim3 grid;
};

// About 4 blocks per SM, each thread on at least 16 rows (so the partials stay a few percent of
// the bytes read).
inline DweightPlan dweight_plan(int64_t rows, int64_t h, int num_sms) {
  DweightPlan p;
  const int64_t tiles = wb_ceil_div(h, static_cast<int64_t>(kDweightThreads));
  int64_t slices = wb_ceil_div(4 * static_cast<int64_t>(num_sms > 0 ? num_sms : 1), tiles);
  const int64_t max_slices = wb_ceil_div(rows, static_cast<int64_t>(16));
  slices = slices < max_slices ? slices : max_slices;
  slices = slices < 65535 ? (slices > 0 ? slices : 1) : 65535;
  p.rows_per_slice = wb_ceil_div(rows, slices);
  p.slices = wb_ceil_div(rows, p.rows_per_slice);
  p.grid = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(p.slices));
  return p;
}

// Bytes of scratch: rstd for every row (rounded up to 16 bytes), then the partial sums.
template <typename A>
size_t rstd_bytes(int64_t rows) { return static_cast<size_t>(wb_ceil_div(rows * static_cast<int64_t>(sizeof(A)), int64_t{16}) * 16); }
template <typename A>
size_t dweight_workspace_bytes(int64_t rows, int64_t h, int num_sms) {
  return rstd_bytes<A>(rows) + static_cast<size_t>(dweight_plan(rows, h, num_sms).slices * h) * sizeof(A);
}

template <typename T, typename A>
__global__ void __launch_bounds__(kDweightThreads) dweight_partials_kernel(const T* __restrict__ dy,
                                                                           const T* __restrict__ x,
                                                                           const A* __restrict__ rstd,
                                                                           A* __restrict__ partial, int64_t rows,
                                                                           int64_t h, int64_t rows_per_slice) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kDweightThreads + threadIdx.x;
  if (c >= h) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t end = min(rows, begin + rows_per_slice);
  A s = A(0);
  for (int64_t r = begin; r < end; ++r) s += wb_to_acc(dy[r * h + c]) * wb_to_acc(x[r * h + c]) * rstd[r];
  partial[static_cast<int64_t>(blockIdx.y) * h + c] = s;
}

// dweight from the rstd a row kernel wrote at the start of `workspace` (dweight_workspace_bytes).
template <typename T, typename A>
int dweight_from_rstd(const T* dy, const T* x, T* dweight, void* workspace, int64_t rows, int64_t h,
                      const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const A* rstd = static_cast<const A*>(workspace);
  A* partial = reinterpret_cast<A*>(static_cast<char*>(workspace) + rstd_bytes<A>(rows));
  const DweightPlan p = dweight_plan(rows, h, l->num_sms);
  dweight_partials_kernel<T, A><<<p.grid, kDweightThreads, 0, stream>>>(dy, x, rstd, partial, rows, h,
                                                                        p.rows_per_slice);
  const int status = wb_launch_status();
  if (status != WB_OK) return status;
  return wb_row_tiles::sum_slices<T, A>(partial, dweight, p.slices, h, stream);
}

}  // namespace rmsnorm

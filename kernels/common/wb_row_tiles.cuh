// Kernels for ops of the form y = f(x, bias) with the bias over the last dimension, and their
// backward: dx = df/dx and dbias = the column sums of df/dbias (bias_gelu, scale_bias_relu). The
// op supplies the pointwise math as a functor F (its own header); these kernels supply the memory
// access, V elements (16 bytes) per access.
//
//   struct F {
//     __device__ float forward(float x, float b) const;                        // y
//     __device__ float backward(float dy, float x, float b, float* db) const;  // returns dx; *db: dbias term
//   };
//
// Forward: a flat one-shot grid, one V-wide vector per thread, its bias vector found at
// (vector index % vectors per row). The probe (scripts/probe_bandwidth.cu, H100) measured it at
// 100.5% of the copy bandwidth for scale_bias_relu against 96.9% for the row tiles below with
// streaming (__ldcs) loads, which alone cost 2-3% in every pattern tried: loads here are plain.
//
// Backward: row tiles. Each thread owns V adjacent columns and walks a slice of the rows: it loads
// its V bias values once and sums dbias for its columns in registers over all its rows, in float. Per-slice partial sums go to a workspace and one small
// kernel adds the slices in a fixed order: dbias is deterministic, and with at least
// kBackwardMinRows rows per thread the partials are a few percent of the bytes the main pass moves.
//
// Tile: TX = 32 threads (one warp, 512 contiguous bytes of a row) across column groups and TY =
// kThreads / TX rows: the block's TY rows of threads combine their sums in shared memory, so the
// partials cost TY times less traffic than one row of threads per block would, and a tensor of a
// few hundred rows can still be cut into enough slices to fill the GPU (the reduce_sum ladder's
// lesson: parallelism first, then the fewest partials). At 512 x 4096 the previous tile (TX = 256,
// one row of threads, 16 rows each) ran 64-128 blocks on 132 SMs: 0.56-0.73x torch.compile. Launchers pick V = 1 (scalar accesses) when cols is not a multiple of
// V or a pointer is not 16-byte aligned: same kernels, correct for any view, lower bandwidth.
#pragma once

#include <stdint.h>

#include <initializer_list>

#include "wb_vec.cuh"

namespace wb_row_tiles {

constexpr int kThreads = 256;
constexpr int kTileCols = 32;  // backward: column groups per block (one warp's width)

struct Tiling {
  int tx, ty;          // threads across column groups, rows per block step
  int64_t groups;      // column groups of V elements per row
  int64_t slices;      // row slices (gridDim.y)
  int64_t rows_per_slice;
  dim3 grid;
};

// Cut the rows into slices (gridDim.y) so that each thread walks at least `min_rows` rows and
// there are at most `max_blocks` blocks. Requires cols >= v (one column group) and rows >= 1.
inline Tiling make_tiling(int64_t rows, int64_t cols, int v, int64_t max_blocks, int64_t min_rows) {
  Tiling t;
  t.groups = cols / v;
  t.tx = static_cast<int>(t.groups < kTileCols ? t.groups : kTileCols);
  t.ty = kThreads / t.tx;
  const int64_t grid_x = wb_ceil_div(t.groups, t.tx);
  int64_t slices = max_blocks / grid_x;
  const int64_t max_slices = wb_ceil_div(rows, static_cast<int64_t>(t.ty) * min_rows);
  slices = slices < max_slices ? slices : max_slices;
  slices = slices < 65535 ? (slices > 0 ? slices : 1) : 65535;
  t.rows_per_slice = wb_ceil_div(rows, slices);
  t.slices = wb_ceil_div(rows, t.rows_per_slice);
  t.grid = dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(t.slices));
  return t;
}

// Backward: at most the blocks that are resident at once (one balanced wave, no tail), each thread
// on at least 4 rows: every block writes one float per (slice, column), so the number of slices is
// also what the dbias partial sums cost in traffic (at 512 x 4096, 16 slices: 4% of the bytes).
constexpr int64_t kBackwardMinRows = 4;

template <typename Kernel>
inline int64_t resident_blocks(Kernel kernel, int num_sms) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  return static_cast<int64_t>(per_sm) * (num_sms > 0 ? num_sms : 1);
}

// What one thread owns: V columns starting at `col`, whose bias it holds in float, and the rows
// [begin, end) of its block's slice that it walks, `step` (= ty) apart.
template <typename T, int V>
struct ThreadTile {
  bool active;
  int64_t col, begin, end;
  float bias[V];

  __device__ __forceinline__ ThreadTile(const T* __restrict__ b, int64_t rows, int64_t cols, int tx, int ty,
                                        int64_t rows_per_slice) {
    const int lane_x = threadIdx.x % tx, lane_y = threadIdx.x / tx;
    col = (static_cast<int64_t>(blockIdx.x) * tx + lane_x) * V;
    active = lane_y < ty && col < cols;
    begin = static_cast<int64_t>(blockIdx.y) * rows_per_slice + lane_y;
    end = min(rows, static_cast<int64_t>(blockIdx.y + 1) * rows_per_slice);
    if (active) {
      const WbVec<T, V> bv = wb_load<T, V>(b + col);
#pragma unroll
      for (int j = 0; j < V; ++j) bias[j] = wb_to_acc(bv.v[j]);
    }
  }
};

// y = f(x, bias) for nvec vectors of V elements; a row holds row_vecs of them.
template <typename T, int V, typename F>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ x, const T* __restrict__ bias,
                                                           T* __restrict__ y, int64_t nvec, int64_t row_vecs, F f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= nvec) return;
  const WbVec<T, V> in = wb_load<T, V>(x + i * V);
  const WbVec<T, V> b = wb_load<T, V>(bias + (i % row_vecs) * V);
  WbVec<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = wb_from_acc<T>(f.forward(wb_to_acc(in.v[j]), wb_to_acc(b.v[j])));
  wb_store<T, V>(y + i * V, out);
}

template <typename T, int V, typename F>
__device__ __forceinline__ void backward_step(T* __restrict__ dx, int64_t offset, const WbVec<T, V>& gv,
                                              const WbVec<T, V>& xv, const float* b, float* sum, const F& f) {
  WbVec<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float db;
    out.v[j] = wb_from_acc<T>(f.backward(wb_to_acc(gv.v[j]), wb_to_acc(xv.v[j]), b[j], &db));
    sum[j] += db;
  }
  wb_store<T, V>(dx + offset, out);
}

// dx for the thread's V columns over its rows, and the float partial sums of their dbias terms
// into partial[blockIdx.y * cols + c ...].
template <typename T, int V, int UNROLL, typename F>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                            const T* __restrict__ bias, T* __restrict__ dx,
                                                            float* __restrict__ partial, int64_t rows, int64_t cols,
                                                            int tx, int ty, int64_t rows_per_slice, F f) {
  const ThreadTile<T, V> tile(bias, rows, cols, tx, ty, rows_per_slice);
  const int64_t c = tile.col, r_end = tile.end;
  const float* b = tile.bias;
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  if (tile.active) {
    int64_t r = tile.begin;
    for (; r + (UNROLL - 1) * ty < r_end; r += UNROLL * ty) {
      WbVec<T, V> gv[UNROLL], xv[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        gv[u] = wb_load<T, V>(dy + (r + u * ty) * cols + c);
        xv[u] = wb_load<T, V>(x + (r + u * ty) * cols + c);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) backward_step<T, V>(dx, (r + u * ty) * cols + c, gv[u], xv[u], b, sum, f);
    }
    for (; r < r_end; r += ty)
      backward_step<T, V>(dx, r * cols + c, wb_load<T, V>(dy + r * cols + c),
                          wb_load<T, V>(x + r * cols + c), b, sum, f);
  }
  // Rows of a block that share columns (ty > 1) are combined through shared memory in a fixed
  // order, so each (slice, column) has exactly one partial sum.
  __shared__ float shared[kThreads * V];
#pragma unroll
  for (int j = 0; j < V; ++j) shared[threadIdx.x * V + j] = sum[j];
  __syncthreads();
  if (tile.active && threadIdx.x < tx) {  // the block's first row of threads owns the sums
    for (int k = 1; k < ty; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += shared[(k * tx + threadIdx.x) * V + j];
#pragma unroll
    for (int j = 0; j < V; ++j) partial[static_cast<int64_t>(blockIdx.y) * cols + c + j] = sum[j];
  }
}

// dbias[c] = sum over slices of partial[s][c]. A block owns 32 columns; its 8 warps-rows take
// every 8th slice, then one row adds the 8 sums in order: parallel, and still deterministic.
// A: the partials' type (float; double where a float64 op keeps double partials).
constexpr int kSumCols = 32, kSumRows = 8;

template <typename T, typename A = float>
__global__ void __launch_bounds__(kSumCols * kSumRows) sum_slices_kernel(const A* __restrict__ partial,
                                                                         T* __restrict__ dbias, int64_t slices,
                                                                         int64_t cols) {
  __shared__ A sums[kSumRows][kSumCols + 1];
  const int lx = threadIdx.x % kSumCols, ly = threadIdx.x / kSumCols;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kSumCols + lx;
  A s = A(0);
  if (c < cols)
    for (int64_t k = ly; k < slices; k += kSumRows) s += partial[k * cols + c];
  sums[ly][lx] = s;
  __syncthreads();
  if (ly == 0 && c < cols) {
    for (int r = 1; r < kSumRows; ++r) s += sums[r][lx];
    dbias[c] = wb_from_acc<T>(s);
  }
}

// Launch sum_slices_kernel: out[c] = the sum of partial[s][c] over `slices` rows of partials.
template <typename T, typename A = float>
int sum_slices(const A* partial, T* out, int64_t slices, int64_t cols, cudaStream_t stream) {
  sum_slices_kernel<T, A><<<wb_ceil_div(cols, kSumCols), kSumCols * kSumRows, 0, stream>>>(partial, out, slices, cols);
  return wb_launch_status();
}

// V when the vector path applies to these pointers and this row length, else 1.
template <typename T, int V>
inline int vector_width(int64_t cols, std::initializer_list<const void*> ptrs) {
  if (cols % V != 0) return 1;
  for (const void* p : ptrs)
    if (!wb_aligned(p, sizeof(T) * V)) return 1;
  return V;
}

// y[r, c] = f.forward(x[r, c], bias[c]) for a [rows, cols] x.
template <typename T, int V, typename F>
int forward(const T* x, const T* bias, T* y, int64_t rows, int64_t cols, const F& f, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const int v = vector_width<T, V>(cols, {x, bias, y});
  const int64_t nvec = rows * cols / v;
  const unsigned blocks = static_cast<unsigned>(wb_ceil_div(nvec, kThreads));
  if (v == V)
    forward_kernel<T, V><<<blocks, kThreads, 0, stream>>>(x, bias, y, nvec, cols / V, f);
  else
    forward_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(x, bias, y, nvec, cols, f);
  return wb_launch_status();
}

// The backward's tiling for vector width v (V, or 1 for the scalar-access route).
template <typename T, int V, typename F>
Tiling backward_tiling(int64_t rows, int64_t cols, int v, int num_sms) {
  const int64_t resident = v == V ? resident_blocks(backward_kernel<T, V, 2, F>, num_sms)
                                  : resident_blocks(backward_kernel<T, 1, 2, F>, num_sms);
  return make_tiling(rows, cols, v, resident, kBackwardMinRows);
}

// The workspace is sized before the pointers are known, so for whichever route runs.
template <typename T, int V, typename F>
size_t workspace_bytes(int64_t rows, int64_t cols, const WbLaunch* l) {
  const int64_t scalar = backward_tiling<T, V, F>(rows, cols, 1, l->num_sms).slices;
  const int64_t vec = cols % V == 0 ? backward_tiling<T, V, F>(rows, cols, V, l->num_sms).slices : 0;
  return static_cast<size_t>((vec > scalar ? vec : scalar) * cols) * sizeof(float);
}

// dx[r, c] = f.backward(dy[r, c], x[r, c], bias[c], &t) and dbias[c] = the sum of t over the rows,
// with workspace_bytes<T, V, F>(rows, cols, l) bytes of scratch.
template <typename T, int V, typename F>
int backward(const T* dy, const T* x, const T* bias, T* dx, T* dbias, void* workspace, int64_t rows, int64_t cols,
             const F& f, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const int v = vector_width<T, V>(cols, {dy, x, bias, dx});
  const Tiling t = backward_tiling<T, V, F>(rows, cols, v, l->num_sms);
  float* partial = static_cast<float*>(workspace);
  if (v == V)
    backward_kernel<T, V, 2><<<t.grid, kThreads, 0, stream>>>(dy, x, bias, dx, partial, rows, cols, t.tx, t.ty,
                                                              t.rows_per_slice, f);
  else
    backward_kernel<T, 1, 2><<<t.grid, kThreads, 0, stream>>>(dy, x, bias, dx, partial, rows, cols, t.tx, t.ty,
                                                              t.rows_per_slice, f);
  const int status = wb_launch_status();
  if (status != WB_OK) return status;
  return sum_slices<T>(partial, dbias, t.slices, cols, stream);
}

}  // namespace wb_row_tiles

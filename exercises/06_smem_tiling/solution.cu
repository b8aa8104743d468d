// Exercise 06 (shared-memory tiling) - a solution.
//
// matmul (C = op(A) @ op(B)) for float32, forward and backward, any m, k, n. One thread per
// output; a 32 x 32 block of threads covers a 32 x 32 tile of C, threadIdx.x along n. For each
// slice of 32 along k, the block's 1024 threads first copy a 32 x 32 tile of op(A) and one of
// op(B) into shared memory, one element each, consecutive threads at consecutive addresses
// whichever way the operand is stored; then each thread takes the 32 steps of its dot product
// from the tiles. Each value loaded from global memory now serves the 32 outputs of its row (A)
// or column (B) in the block instead of one. Two barriers per slice: the tiles are complete
// before anyone reads them, and read by everyone before the next slice overwrites them.
//
// Tails: elements past m, n or k load as zeros (a zero adds nothing to a sum; a row past m or a
// column past n computes an output that is never stored). Every thread takes part in the loads
// and the barriers, inside C or not; only the store is predicated.
#include "gemm.cuh"

namespace {

constexpr int kTile = 32;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kTile * kTile) tiled_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  // Rows padded to kTile + 1: a warp writing down a column of a tile (a transposed operand's
  // load) hits 32 different banks instead of one bank 32 times.
  __shared__ T as[kTile][kTile + 1];  // as[i][p] = op(A)(row0 + i, k0 + p)
  __shared__ T bs[kTile][kTile + 1];  // bs[p][j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<kTile, kTile>(tiles_m, tiles_n, &row0, &col0);
  const int tx = threadIdx.x, ty = threadIdx.y;
  // Which element of each tile this thread copies: threadIdx.x runs along the operand's
  // contiguous dimension in memory, so a warp reads 32 consecutive values. op(A)(i, p) lies at
  // a[i * lda + p] (contiguous along p) or, transposed, at a[p * lda + i] (along i); op(B)(p, j)
  // at b[p * ldb + j] (along j) or, transposed, at b[j * ldb + p] (along p).
  const int ai = TA ? tx : ty, ap = TA ? ty : tx;
  const int bp = TB ? tx : ty, bj = TB ? ty : tx;
  float sum = 0.f;
  for (int64_t k0 = 0; k0 < g.k; k0 += kTile) {
    const int64_t ar = row0 + ai, ac = k0 + ap, br = k0 + bp, bc = col0 + bj;
    as[ai][ap] = ar < g.m && ac < g.k ? matmul::op_at<TA>(g.a, g.lda, ar, ac) : T(0);
    bs[bp][bj] = br < g.k && bc < g.n ? matmul::op_at<TB>(g.b, g.ldb, br, bc) : T(0);
    __syncthreads();  // the tiles are complete
    // as[ty][p] is one address for the whole warp (a broadcast); bs[p][tx] 32 consecutive words.
#pragma unroll
    for (int p = 0; p < kTile; ++p) sum += as[ty][p] * bs[p][tx];
    __syncthreads();  // everyone is done with these tiles before the next slice overwrites them
  }
  const int64_t row = row0 + ty, col = col0 + tx;
  if (row < g.m && col < g.n) g.c[row * g.n + col] = sum;
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, kTile), tn = matmul::tiles(g.n, kTile);
    return matmul::launch(tiled_kernel<T, TA, TB>, tm * tn, dim3(kTile, kTile), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "exercise 06: matmul, 32 x 32 tiles of A and B staged in shared memory, one output per thread; "
                  "float32; any size",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

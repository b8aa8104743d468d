// naive: rung 1 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 1), the course's kernel.
// One thread per output: a 32 x 32 block of threads covers a 32 x 32 tile of C, and thread (x, y)
// sums op(A)[row, p] * op(B)[p, col] over p straight from global memory, with row = tile row + x
// and col = tile col + y. threadIdx.x runs along m, so the 32 threads of a warp sit in 32
// different rows: each load of A touches 32 sectors to use 4 bytes of each, and each store of C
// is 32 separate writes; the warp's loads of B are one address, broadcast. The caches absorb part
// of it. float32 and float64 (sums in double), so gradcheck on the GPU is a true float64
// gradcheck. Any m, n, k: threads outside C return; the backward's transposed operands go through
// the same addressing (matmul::op_at), no copies.
// Predicted: siboehm measured 309 GFLOP/s, 1.3% of cuBLAS, on an A6000 at 4096^3; expect about
// the same share of cuBLAS's float32 GEMM here: the memory system, not arithmetic, limits it.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 275.01 ms, 0.5 TFLOP/s,
// 0.01x cuBLAS; 8192^3 2170.17 ms, 0.5 TFLOP/s, 0.01x cuBLAS.
#include "gemm.cuh"

namespace {

constexpr int kTile = 32;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kTile * kTile) naive_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  int64_t row0, col0;
  matmul::block_tile<kTile, kTile>(tiles_m, tiles_n, &row0, &col0);
  const int64_t row = row0 + threadIdx.x, col = col0 + threadIdx.y;  // x along m: a warp spans 32 rows
  if (row >= g.m || col >= g.n) return;
  wb_acc_t<T> sum = 0;
  for (int64_t p = 0; p < g.k; ++p)
    sum += wb_to_acc(matmul::op_at<TA>(g.a, g.lda, row, p)) * wb_to_acc(matmul::op_at<TB>(g.b, g.ldb, p, col));
  g.c[row * g.n + col] = wb_from_acc<T>(sum);
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32 | WB_F64;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, kTile), tn = matmul::tiles(g.n, kTile);
    return matmul::launch(naive_kernel<T, TA, TB>, tm * tn, dim3(kTile, kTile), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32 | WB_F64,
                  "rung 1: one thread per output from global memory, threadIdx.x along m (a warp's loads of "
                  "A uncoalesced); float32 and float64; any size",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

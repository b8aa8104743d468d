// blocktile_2d: rung 5 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 5). Over
// blocktile_1d: each thread computes a TM x TN = 8 x 8 tile of outputs (64 accumulators in
// registers). A block of 256 threads owns a 128 x 128 tile of C and walks k in slices of BK = 8;
// per step of k a thread loads 8 values of A and 8 of B into registers and does their 64
// products: 16 values read from shared memory per 64 multiply-adds (blocktile_1d: 9 per 8). Each slice stages 4
// elements of each tile per thread. A's tile rows are padded to 9 floats: the two rows of
// threads in a warp then read different banks. Tails: zeros past m, n, k; outputs past m or n are
// not stored; any size.
// Predicted: siboehm measured 15971.7 GFLOP/s, 68.7% of cuBLAS (from 36.5%) on an A6000 at
// 4096^3, 1.9x over blocktile_1d. Expect ~1.5-2x.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 4.79 ms, 28.7 TFLOP/s,
// 0.56x cuBLAS, 2.37x blocktile_1d; 8192^3 37.81 ms, 29.1 TFLOP/s, 0.56x cuBLAS, 2.38x blocktile_1d.
#include "gemm.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
constexpr int kPadK = BK + 1;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads, 2) blocktile_2d_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  __shared__ T as[BM * kPadK];  // as[i * kPadK + p] = op(A)(row0 + i, k0 + p)
  __shared__ T bs[BK * BN];     // bs[p * BN + j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<BM, BN>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, tc = tid % (BN / TN), tr = tid / (BN / TN);  // outputs (tr*TM + i, tc*TN + j)
  const matmul::TileLoader<T, BK, BM, kThreads, 1, TA, 1, kPadK> load_a(g.a, g.lda, row0, g.m, tid);
  const matmul::TileLoader<T, BK, BN, kThreads, 1, !TB, BN, 1> load_b(g.b, g.ldb, col0, g.n, tid);
  float acc[TM][TN] = {}, a[TM], b[TN];
  for (int64_t k0 = 0; k0 < g.k; k0 += BK) {
    load_a.load(k0, g.k, as);
    load_b.load(k0, g.k, bs);
    __syncthreads();
#pragma unroll 2  // unrolled further, ptxas hoists more shared loads than 128 registers hold
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = as[(tr * TM + i) * kPadK + p];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = bs[p * BN + tc * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) matmul::store_run<TN, 1>(g, row0 + tr * TM + i, col0 + tc * TN, acc[i]);
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    return matmul::launch(blocktile_2d_kernel<T, TA, TB>, tm * tn, dim3(kThreads), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 5: 128 x 128 block tile, BK = 8, each thread an 8 x 8 register tile (16 shared values "
                  "per 64 multiply-adds); float32; any size",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

// blocktile_1d: rung 4 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 4). Over
// smem_tiling: each thread computes a column of TM = 8 outputs instead of one. A block of 512
// threads owns a 64 x 64 tile of C and walks k in slices of BK = 8: per slice it stages a 64 x 8
// tile of op(A) and an 8 x 64 tile of op(B) (one element per thread each), and per step of k a
// thread loads one value of B into a register and multiplies it with 8 values of A: 9 values read
// from shared memory per 8 multiply-adds instead of 2 per 1. The 8 values of A are the same for the whole warp (a
// broadcast). A's tile rows are padded to 9 floats (a transposed A's loads write down columns).
// Tails: zeros past m, n, k; outputs past m or n are not stored; any size.
// Predicted: siboehm measured 8474.7 GFLOP/s, 36.5% of cuBLAS (from 12.8%) on an A6000 at 4096^3,
// 2.8x over smem_tiling. Expect ~2-3x.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 11.35 ms, 12.1 TFLOP/s,
// 0.24x cuBLAS, 1.87x smem_tiling; 8192^3 90.11 ms, 12.2 TFLOP/s, 0.24x cuBLAS, 1.86x smem_tiling.
#include "gemm.cuh"

namespace {

constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
constexpr int kThreads = BM * BN / TM;  // 512
constexpr int kPadK = BK + 1;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads, 2) blocktile_1d_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  __shared__ T as[BM * kPadK];  // as[i * kPadK + p] = op(A)(row0 + i, k0 + p)
  __shared__ T bs[BK * BN];     // bs[p * BN + j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<BM, BN>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, tc = tid % BN, tr = tid / BN;  // outputs (tr * TM + i, tc)
  const matmul::TileLoader<T, BK, BM, kThreads, 1, TA, 1, kPadK> load_a(g.a, g.lda, row0, g.m, tid);
  const matmul::TileLoader<T, BK, BN, kThreads, 1, !TB, BN, 1> load_b(g.b, g.ldb, col0, g.n, tid);
  float acc[TM] = {};
  for (int64_t k0 = 0; k0 < g.k; k0 += BK) {
    load_a.load(k0, g.k, as);
    load_b.load(k0, g.k, bs);
    __syncthreads();
#pragma unroll 4  // fully unrolled, ptxas hoists all 64 loads of A and needs > 64 registers
    for (int p = 0; p < BK; ++p) {
      const float b = bs[p * BN + tc];
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] += as[(tr * TM + i) * kPadK + p] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) matmul::store_run<1, 1>(g, row0 + tr * TM + i, col0 + tc, &acc[i]);
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    return matmul::launch(blocktile_1d_kernel<T, TA, TB>, tm * tn, dim3(kThreads), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 4: 64 x 64 block tile, BK = 8, each thread a column of 8 outputs (one B value in a "
                  "register per 8 multiply-adds); float32; any size",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

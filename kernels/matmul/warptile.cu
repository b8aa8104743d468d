// warptile: rung 7 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 10, with its A6000
// parameters). Over vectorized (float4 global and shared accesses, A's tile transposed): a
// level of tiling between the block and the thread. The 128 x 128 block tile (BK = 16, 128
// threads) is cut into four 64 x 64 warp tiles, one per warp; a warp covers its tile as
// WNITER = 4 column strips of 64 x 16, and each thread holds an 8 x 4 piece of every strip
// (128 accumulators). Why it pays:
// - a warp's 32 threads read only their warp tile's 64 + 64 values of a k-step from shared memory:
//   8 distinct float4 pairs of A (each read by 4 lanes) and 4 distinct float4s of B per strip,
//   no bank conflicts (in vectorized, 16 lanes read B 32 bytes apart: 2-way conflicts);
// - each thread does 128 multiply-adds per 6 shared loads (vectorized: 64 per 4), with twice the
//   independent accumulators to hide the loads' latency;
// - the block's work comes in warp-sized units that the scheduler can interleave.
// Global loads, route and tails as in vectorized (matmul::TileLoader, matmul::vector_route): 4
// float4s of each tile per thread, or one float per access where rows are not whole aligned
// float4s; zeros past m, n, k, no stores past m, n; any size.
// Predicted: siboehm measured 21779.3 GFLOP/s, 93.7% of cuBLAS (from 78.4% for vectorized, and
// 84.8% once vectorized's sizes were autotuned) on an A6000 at 4096^3, 1.19x over vectorized.
// Expect ~1.1-1.2x; these parameters were tuned for the A6000, not the H100.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 3.96 ms, 34.7 TFLOP/s,
// 0.68x cuBLAS, 1.12x vectorized; 8192^3 32.09 ms, 34.3 TFLOP/s, 0.66x cuBLAS, 1.08x vectorized.
#include "gemm.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 16;   // block tile
constexpr int WM = 64, WN = 64;              // warp tile
constexpr int WNITER = 4, TM = 8, TN = 4;    // a thread: WMITER x WNITER pieces of TM x TN
constexpr int kThreads = 32 * (BM / WM) * (BN / WN);             // 128
constexpr int WMITER = WM * WN / (32 * TM * TN * WNITER);        // 1
constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;          // a strip: 64 x 16
static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "a warp's 32 threads cover a strip");

template <typename T, bool TA, bool TB, int V>
__global__ void __launch_bounds__(kThreads) warptile_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  __shared__ __align__(16) T as[BK * BM];  // as[p * BM + i] = op(A)(row0 + i, k0 + p): transposed
  __shared__ __align__(16) T bs[BK * BN];  // bs[p * BN + j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<BM, BN>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The thread's first row and column in the block tile; piece (wm, wn) adds wm * WSUBM, wn * WSUBN.
  const int row = warp / (BN / WN) * WM + lane / (WSUBN / TN) * TM;
  const int col = warp % (BN / WN) * WN + lane % (WSUBN / TN) * TN;
  const matmul::TileLoader<T, BK, BM, kThreads, V, TA, BM, 1> load_a(g.a, g.lda, row0, g.m, tid);
  const matmul::TileLoader<T, BK, BN, kThreads, V, !TB, BN, 1> load_b(g.b, g.ldb, col0, g.n, tid);
  float acc[WMITER * TM][WNITER * TN] = {}, a[WMITER * TM], b[WNITER * TN];
  for (int64_t k0 = 0; k0 < g.k; k0 += BK) {
    load_a.load(k0, g.k, as);
    load_b.load(k0, g.k, bs);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; i += 4) {
          const WbVec<float, 4> v = wb_load<float, 4>(as + p * BM + row + wm * WSUBM + i);
          for (int t = 0; t < 4; ++t) a[wm * TM + i + t] = v.v[t];
        }
#pragma unroll
      for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const WbVec<float, 4> v = wb_load<float, 4>(bs + p * BN + col + wn * WSUBN + j);
          for (int t = 0; t < 4; ++t) b[wn * TN + j + t] = v.v[t];
        }
#pragma unroll
      for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int wn = 0; wn < WNITER; ++wn)
        matmul::store_run<TN, V>(g, row0 + row + wm * WSUBM + i, col0 + col + wn * WSUBN, &acc[wm * TM + i][wn * TN]);
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    return matmul::vector_route<4, TA, TB>(g)
               ? matmul::launch(warptile_kernel<T, TA, TB, 4>, tm * tn, dim3(kThreads), s, g, tm, tn)
               : matmul::launch(warptile_kernel<T, TA, TB, 1>, tm * tn, dim3(kThreads), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 7: warp tiling (128 x 128 block, four 64 x 64 warp tiles, 8 x 4 x 4 outputs per thread, "
                  "BK = 16), float4 accesses; one float per access where rows are not whole aligned float4s",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

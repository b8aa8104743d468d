// warptile: rung 7 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 10, its tile sizes
// re-tuned for the H100, plus kernel 11's second buffer). Over vectorized (float4 global and
// shared accesses, A's tile transposed): a level of tiling between the block and the thread. The
// 128 x 128 block tile (BK = 8, 128 threads) is cut into four 64 x 64 warp tiles, one per warp; a warp covers its tile as
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
// And a second shared buffer (siboehm's kernel 11, here on top of 10): tile t + 1 is fetched into
// registers before tile t is multiplied and stored into the other buffer after, so the loads'
// latency hides behind 8 x 128 multiply-adds per thread and one barrier per tile replaces two.
// The plan (tile sizes, buffers) was picked by scripts/matmul_tune.cu on the H100
// (results/gpu/c890d84/matmul_tune.log, cuBLAS 2.68 ms at 4096^3): A6000's plan (BK = 16, one
// buffer) 3.76 ms; with two buffers 3.25 ms; BK = 8 with two buffers 3.09 ms, the fastest of 13
// (128 x 256 tiles tie at 3.09 ms; 256 threads of 8 x 4 x 2 outputs 3.27-3.32 ms; registers capped
// for three blocks an SM, 5.88 ms). ptxas: 255 registers, no spills, 16 KiB of shared memory: two
// blocks (8 warps) an SM.
// Predicted: siboehm measured 21779.3 GFLOP/s, 93.7% of cuBLAS (from 78.4% for vectorized, and
// 84.8% once vectorized's sizes were autotuned) on an A6000 at 4096^3, 1.19x over vectorized:
// ~1.1-1.2x expected with the A6000's plan, which gave 1.12x (0.68x cuBLAS, results/gpu/2b4b1ce);
// with the sweep's plan, 3.09 ms there against vectorized's 4.39 ms: ~1.4x.
// Measured (results/gpu/c4f8664, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 3.09 ms,
// 44.4 TFLOP/s, 0.86x cuBLAS, 1.42x vectorized; 8192^3 24.47 ms, 44.9 TFLOP/s, 0.86x cuBLAS,
// 1.41x vectorized; 16384 x 4096 x 11008 0.91x cuBLAS. Not profiled: where cuBLAS's last 14% comes
// from (two blocks of 4 warps an SM leave each scheduler 2 warps to hide a barrier with).
#include "gemm.cuh"

namespace {

// A warp-tiling plan: the BM x BN block tile (BK deep) cut into WM x WN warp tiles; a warp covers
// its tile as WMITER x WNITER strips of WSUBM x WSUBN, each thread a TM x TN piece of every strip.
// STAGES = 2 double-buffers the shared tiles (tile t + 1 is fetched into registers while tile t is
// multiplied: one barrier per tile instead of two); MIN_BLOCKS caps the registers (launch bounds).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int WNITER_, int TM_, int TN_, int STAGES_, int MIN_BLOCKS_ = 1>
struct Plan {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, WNITER = WNITER_, TM = TM_, TN = TN_;
  static constexpr int kStages = STAGES_, kMinBlocks = MIN_BLOCKS_;
  static constexpr int kThreads = 32 * (BM / WM) * (BN / WN);
  static constexpr int WMITER = WM * WN / (32 * TM * TN * WNITER);
  static constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
  static_assert(WMITER >= 1 && (WSUBM / TM) * (WSUBN / TN) == 32, "a warp's 32 threads cover a strip");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "float4 shared reads");
  static_assert(kStages == 1 || kStages == 2, "one or two shared buffers");
  static_assert(kStages * BK * (BM + BN) * 4 <= 48 * 1024, "static shared memory");
};

// One BK-deep slice of the block tile: every thread's WMITER*TM x WNITER*TN products.
template <class P>
__device__ __forceinline__ void multiply_slice(const float* as, const float* bs, int row, int col,
                                               float (&acc)[P::WMITER * P::TM][P::WNITER * P::TN]) {
  float a[P::WMITER * P::TM], b[P::WNITER * P::TN];
#pragma unroll
  for (int p = 0; p < P::BK; ++p) {
#pragma unroll
    for (int wm = 0; wm < P::WMITER; ++wm)
#pragma unroll
      for (int i = 0; i < P::TM; i += 4) {
        const WbVec<float, 4> v = wb_load<float, 4>(as + p * P::BM + row + wm * P::WSUBM + i);
        for (int t = 0; t < 4; ++t) a[wm * P::TM + i + t] = v.v[t];
      }
#pragma unroll
    for (int wn = 0; wn < P::WNITER; ++wn)
#pragma unroll
      for (int j = 0; j < P::TN; j += 4) {
        const WbVec<float, 4> v = wb_load<float, 4>(bs + p * P::BN + col + wn * P::WSUBN + j);
        for (int t = 0; t < 4; ++t) b[wn * P::TN + j + t] = v.v[t];
      }
#pragma unroll
    for (int i = 0; i < P::WMITER * P::TM; ++i)
#pragma unroll
      for (int j = 0; j < P::WNITER * P::TN; ++j) acc[i][j] += a[i] * b[j];
  }
}

template <class P, typename T, bool TA, bool TB, int V>
__global__ void __launch_bounds__(P::kThreads, P::kMinBlocks) warptile_kernel(matmul::Gemm<T> g, int64_t tiles_m,
                                                                               int64_t tiles_n) {
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK;
  __shared__ __align__(16) T as[P::kStages][BK * BM];  // as[p * BM + i] = op(A)(row0 + i, k0 + p): transposed
  __shared__ __align__(16) T bs[P::kStages][BK * BN];  // bs[p * BN + j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<BM, BN>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The thread's first row and column in the block tile; piece (wm, wn) adds wm * WSUBM, wn * WSUBN.
  const int row = warp / (BN / P::WN) * P::WM + lane / (P::WSUBN / P::TN) * P::TM;
  const int col = warp % (BN / P::WN) * P::WN + lane % (P::WSUBN / P::TN) * P::TN;
  using LoadA = matmul::TileLoader<T, BK, BM, P::kThreads, V, TA, BM, 1>;
  using LoadB = matmul::TileLoader<T, BK, BN, P::kThreads, V, !TB, BN, 1>;
  const LoadA load_a(g.a, g.lda, row0, g.m, tid);
  const LoadB load_b(g.b, g.ldb, col0, g.n, tid);
  float acc[P::WMITER * P::TM][P::WNITER * P::TN] = {};
  if constexpr (P::kStages == 1) {
    for (int64_t k0 = 0; k0 < g.k; k0 += BK) {
      load_a.load(k0, g.k, as[0]);
      load_b.load(k0, g.k, bs[0]);
      __syncthreads();
      multiply_slice<P>(as[0], bs[0], row, col, acc);
      __syncthreads();
    }
  } else {
    typename LoadA::Staged ra;
    typename LoadB::Staged rb;
    load_a.load(0, g.k, as[0]);
    load_b.load(0, g.k, bs[0]);
    __syncthreads();
    const int64_t k_tiles = (g.k + BK - 1) / BK;
    for (int64_t t = 0; t < k_tiles; ++t) {
      const int s = static_cast<int>(t & 1);
      const bool next = t + 1 < k_tiles;
      if (next) {
        load_a.fetch((t + 1) * BK, g.k, ra);
        load_b.fetch((t + 1) * BK, g.k, rb);
      }
      multiply_slice<P>(as[s], bs[s], row, col, acc);
      // Buffer s ^ 1 was last read in step t - 1, which every thread finished before the barrier
      // that ended it: one barrier per tile.
      if (next) {
        load_a.put(ra, as[s ^ 1]);
        load_b.put(rb, bs[s ^ 1]);
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int wm = 0; wm < P::WMITER; ++wm)
#pragma unroll
    for (int i = 0; i < P::TM; ++i)
#pragma unroll
      for (int wn = 0; wn < P::WNITER; ++wn)
        matmul::store_run<P::TN, V>(g, row0 + row + wm * P::WSUBM + i, col0 + col + wn * P::WSUBN,
                                    &acc[wm * P::TM + i][wn * P::TN]);
}

// The rung's GEMM with plan P (scripts/matmul_tune.cu times other plans through it).
template <class P>
struct Tiled {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, P::BM), tn = matmul::tiles(g.n, P::BN);
    return matmul::vector_route<4, TA, TB>(g)
               ? matmul::launch(warptile_kernel<P, T, TA, TB, 4>, tm * tn, dim3(P::kThreads), s, g, tm, tn)
               : matmul::launch(warptile_kernel<P, T, TA, TB, 1>, tm * tn, dim3(P::kThreads), s, g, tm, tn);
  }
};

// Picked from results/gpu/c890d84/matmul_tune.log: the fastest plan at 4096^3 and 8192^3.
using Rung = Tiled<Plan<128, 128, 8, 64, 64, 4, 8, 4, 2>>;

}  // namespace

#ifndef WB_MATMUL_TUNING
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 7: warp tiling (128 x 128 block, four 64 x 64 warp tiles, 8 x 4 x 4 outputs per thread, "
                  "BK = 8, two shared buffers), float4 accesses; one float per access where rows are not whole "
                  "aligned float4s",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)
#endif

// vectorized: rung 6 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 6). Over
// blocktile_2d (same 128 x 128 block tile, BK = 8, 8 x 8 outputs per thread, 256 threads):
// 1. global loads of 16 bytes: each thread moves one float4 of A's tile and one of B's per slice
//    (LDG.E.128) instead of 4 single floats of each;
// 2. A's tile is stored transposed in shared memory, as[p][i], so a thread's 8 values of A for a
//    step of k are contiguous, like its 8 of B: each 8 come as two float4 shared loads (LDS.128),
//    4 load instructions per 64 multiply-adds. (In blocktile_2d the compiler already merges B's 8
//    into two LDS.128, but A's, 9 floats apart, take narrower loads: 8 instructions per step.)
// 3. the outputs go out as float4 stores.
// For A as stored (forward, da) the float4 runs along k and is written down a column of as (4
// scalar stores); for a transposed A (db) it runs along m and lands as one float4 store; B alike
// the other way round (matmul::TileLoader picks the direction from the transpose flags).
// Route: float4 needs every row of A, B and C to be whole, aligned float4s (matmul::vector_route:
// the leading dimensions and the contiguous extents multiples of 4, 16-byte aligned pointers);
// otherwise the same kernel runs with V = 1, one float per global access. Tails past m, n, k are
// predicated (zeros in, nothing out) in both routes: any size.
// Predicted: siboehm measured 18237.3 GFLOP/s, 78.4% of cuBLAS (from 68.7%) on an A6000 at
// 4096^3, 1.14x over blocktile_2d. Expect ~1.1-1.2x.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 4.42 ms, 31.1 TFLOP/s,
// 0.61x cuBLAS, 1.08x blocktile_2d; 8192^3 34.55 ms, 31.8 TFLOP/s, 0.62x cuBLAS, 1.09x blocktile_2d.
#include "gemm.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256

template <typename T, bool TA, bool TB, int V>
__global__ void __launch_bounds__(kThreads, 2) vectorized_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  __shared__ __align__(16) T as[BK * BM];  // as[p * BM + i] = op(A)(row0 + i, k0 + p): transposed
  __shared__ __align__(16) T bs[BK * BN];  // bs[p * BN + j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<BM, BN>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, tc = tid % (BN / TN), tr = tid / (BN / TN);  // outputs (tr*TM + i, tc*TN + j)
  const matmul::TileLoader<T, BK, BM, kThreads, V, TA, BM, 1> load_a(g.a, g.lda, row0, g.m, tid);
  const matmul::TileLoader<T, BK, BN, kThreads, V, !TB, BN, 1> load_b(g.b, g.ldb, col0, g.n, tid);
  float acc[TM][TN] = {}, a[TM], b[TN];
  for (int64_t k0 = 0; k0 < g.k; k0 += BK) {
    load_a.load(k0, g.k, as);
    load_b.load(k0, g.k, bs);
    __syncthreads();
#pragma unroll 2  // unrolled further, ptxas hoists more shared loads than 128 registers hold
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int i = 0; i < TM; i += 4) {
        const WbVec<float, 4> v = wb_load<float, 4>(as + p * BM + tr * TM + i);
        for (int t = 0; t < 4; ++t) a[i + t] = v.v[t];
      }
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const WbVec<float, 4> v = wb_load<float, 4>(bs + p * BN + tc * TN + j);
        for (int t = 0; t < 4; ++t) b[j + t] = v.v[t];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) matmul::store_run<TN, V>(g, row0 + tr * TM + i, col0 + tc * TN, acc[i]);
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    return matmul::vector_route<4, TA, TB>(g)
               ? matmul::launch(vectorized_kernel<T, TA, TB, 4>, tm * tn, dim3(kThreads), s, g, tm, tn)
               : matmul::launch(vectorized_kernel<T, TA, TB, 1>, tm * tn, dim3(kThreads), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 6: blocktile_2d with float4 global loads and stores, A's tile transposed in shared "
                  "memory, float4 shared reads; one float per access where rows are not whole aligned float4s",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

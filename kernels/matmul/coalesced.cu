// coalesced: rung 2 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 2). One change over
// naive: threadIdx.x runs along n. The 32 threads of a warp now compute 32 neighbouring outputs of
// one row, so at each step of k they read one value of A (one address, broadcast) and 32
// consecutive values of B (128 bytes, four full sectors), and store 32 consecutive outputs: the
// loads that took 32 sectors take 4. Each value is still read from global memory (L1/L2) once per
// output that uses it; the next rung stages tiles in shared memory. float32. Any m, n, k: threads
// outside C return. In the backward's N/T GEMM (da = dy @ b^T) op(B) runs along b's columns, so
// there the warp's loads of B are the strided ones: this rung coalesces the forward's layout.
// Predicted: siboehm measured 1986.5 GFLOP/s, 8.5% of cuBLAS (from 1.3%) on an A6000 at 4096^3,
// 6.4x over naive; expect ~5-7x over naive on the forward.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 26.01 ms, 5.3 TFLOP/s,
// 0.10x cuBLAS, 10.57x naive; 8192^3 227.08 ms, 4.8 TFLOP/s, 0.09x cuBLAS, 9.56x naive.
#include "gemm.cuh"

namespace {

constexpr int kTile = 32;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kTile * kTile) coalesced_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  int64_t row0, col0;
  matmul::block_tile<kTile, kTile>(tiles_m, tiles_n, &row0, &col0);
  const int64_t row = row0 + threadIdx.y, col = col0 + threadIdx.x;  // x along n: a warp spans 32 columns
  if (row >= g.m || col >= g.n) return;
  float sum = 0.f;
  for (int64_t p = 0; p < g.k; ++p)
    sum += matmul::op_at<TA>(g.a, g.lda, row, p) * matmul::op_at<TB>(g.b, g.ldb, p, col);
  g.c[row * g.n + col] = sum;
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, kTile), tn = matmul::tiles(g.n, kTile);
    return matmul::launch(coalesced_kernel<T, TA, TB>, tm * tn, dim3(kTile, kTile), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 2: one thread per output, threadIdx.x along n (a warp reads 32 consecutive values of B "
                  "and one of A); float32; any size",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

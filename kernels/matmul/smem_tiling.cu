// smem_tiling: rung 3 of the float32 GEMM ladder (siboehm/SGEMM_CUDA's kernel 3). Over
// coalesced: the block's 1024 threads first copy a 32 x 32 tile of op(A) and one of op(B) into
// shared memory (one element each, coalesced whichever way the operand is stored: matmul::TileLoader
// lays threads along its contiguous dimension), then each thread takes 32 steps of its dot
// product from there. Every value loaded from global memory now serves 32 outputs instead of one:
// 32x less traffic to L1/L2. Two barriers per tile. The tiles' rows are padded to 33 floats so
// that a warp writing a column of a tile (a transposed operand's load) hits 32 different banks.
// Tails: elements past m, n or k load as zeros and outputs past m or n are not stored; any size.
// Predicted: siboehm measured 2980.3 GFLOP/s, 12.8% of cuBLAS (from 8.5%) on an A6000 at 4096^3,
// 1.5x over coalesced: a thread still issues two shared loads per multiply-add, so shared-memory
// bandwidth now caps it. Expect ~1.3-2x over coalesced.
// Measured (results/gpu/2b4b1ce, H100, fp32 fwd, cuBLAS with TF32 off): 4096^3 21.22 ms, 6.5 TFLOP/s,
// 0.13x cuBLAS, 1.23x coalesced; 8192^3 167.20 ms, 6.6 TFLOP/s, 0.13x cuBLAS, 1.36x coalesced.
#include "gemm.cuh"

namespace {

constexpr int kTile = 32, kThreads = kTile * kTile, kPad = kTile + 1;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads) smem_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  __shared__ T as[kTile * kPad];  // as[i * kPad + p] = op(A)(row0 + i, k0 + p)
  __shared__ T bs[kTile * kPad];  // bs[p * kPad + j] = op(B)(k0 + p, col0 + j)
  int64_t row0, col0;
  matmul::block_tile<kTile, kTile>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, tx = tid % kTile, ty = tid / kTile;  // tx along n
  const matmul::TileLoader<T, kTile, kTile, kThreads, 1, TA, 1, kPad> load_a(g.a, g.lda, row0, g.m, tid);
  const matmul::TileLoader<T, kTile, kTile, kThreads, 1, !TB, kPad, 1> load_b(g.b, g.ldb, col0, g.n, tid);
  float sum = 0.f;
  for (int64_t k0 = 0; k0 < g.k; k0 += kTile) {
    load_a.load(k0, g.k, as);
    load_b.load(k0, g.k, bs);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kTile; ++p) sum += as[ty * kPad + p] * bs[p * kPad + tx];
    __syncthreads();  // everyone is done with these tiles before the next ones overwrite them
  }
  const int64_t row = row0 + ty, col = col0 + tx;
  if (row < g.m && col < g.n) g.c[row * g.n + col] = sum;
}

struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, kTile), tn = matmul::tiles(g.n, kTile);
    return matmul::launch(smem_kernel<T, TA, TB>, tm * tn, dim3(kThreads), s, g, tm, tn);
  }
};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "rung 3: 32 x 32 tiles of A and B staged in shared memory (coalesced loads for either "
                  "layout), one output per thread; float32; any size",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

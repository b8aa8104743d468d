// Exercise 06 (shared-memory tiling) - starter.
//
// A correct matmul (C = op(A) @ op(B)) for float32, forward and backward, any m, k, n: the
// `coalesced` rung of the GEMM ladder. One thread per output; a 32 x 32 block of threads covers
// a 32 x 32 tile of C, threadIdx.x along n, and each thread walks k straight through global
// memory. Every value of A and B is loaded from global memory (L1/L2) once per output that uses
// it: 32 times per block. Stage 32 x 32 tiles of op(A) and op(B) in shared memory, one slice of
// k at a time, and take the dot product from there: each value then comes from global memory
// once per block.
// exercises/06_smem_tiling/README.md has the why and the hints; check your copy with:
//
//     python -m workbench exercise check 6 path/to/your_copy.cu
//
// gemm.cuh (kernels/matmul/, on the include path) gives the problem (matmul::Gemm), the
// transposed-or-not addressing (matmul::op_at), which tile of C a block owns (matmul::block_tile)
// and the launcher table (matmul::Variant), which runs gemm<T, TA, TB> once for the forward (TA =
// TB = false) and twice for the backward (da = dy @ b^T: TB = true; db = a^T @ dy: TA = true).
// You only change the kernel.
#include "gemm.cuh"

namespace {

constexpr int kTile = 32;  // the block's tile of C is kTile x kTile; so are the tiles of A and B

// C [m, n] = op(A) [m, k] @ op(B) [k, n], where op(A)(i, p) = matmul::op_at<TA>(g.a, g.lda, i, p)
// and op(B)(p, j) = matmul::op_at<TB>(g.b, g.ldb, p, j).
template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kTile * kTile) tiled_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  // TODO 1: declare two __shared__ tiles, as[kTile][kTile + 1] (op(A)'s rows row0.., its columns
  //         k0..) and bs[kTile][kTile + 1] (op(B)'s rows k0.., its columns col0..). The + 1 pads
  //         each row, so that 32 threads writing down a column hit 32 different banks.
  int64_t row0, col0;
  matmul::block_tile<kTile, kTile>(tiles_m, tiles_n, &row0, &col0);
  const int64_t row = row0 + threadIdx.y, col = col0 + threadIdx.x;  // x along n: a warp spans 32 columns
  // TODO 2: once threads share tiles, every thread must reach every __syncthreads(): a thread
  //         outside C still loads its elements of the tiles (zeros past the edges) and skips only
  //         the final store.
  if (row >= g.m || col >= g.n) return;
  float sum = 0.f;
  // TODO 3: walk k in steps of kTile (k0 = 0, kTile, ...). At each step every thread copies one
  //         element of each tile from global memory into shared memory, zero where the element
  //         lies past m, n or k, with consecutive threads (threadIdx.x) at consecutive addresses:
  //         along p for A as stored (TA = false) and B transposed (TB = true), along the other
  //         index otherwise. Then __syncthreads(); the kTile steps of the dot product from the
  //         tiles, sum += as[threadIdx.y][p] * bs[p][threadIdx.x]; and __syncthreads() again
  //         before the next step overwrites the tiles.
  for (int64_t p = 0; p < g.k; ++p)
    sum += matmul::op_at<TA>(g.a, g.lda, row, p) * matmul::op_at<TB>(g.b, g.ldb, p, col);
  g.c[row * g.n + col] = sum;
}

// One block of kTile x kTile threads per kTile x kTile tile of C, on a 1-D grid.
struct Rung {
  static constexpr unsigned kDtypes = WB_F32;
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, kTile), tn = matmul::tiles(g.n, kTile);
    return matmul::launch(tiled_kernel<T, TA, TB>, tm * tn, dim3(kTile, kTile), s, g, tm, tn);
  }
};

}  // namespace

// The launcher table: float32, the forward and the backward's two GEMMs with this kernel.
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F32,
                  "exercise 06: matmul, one thread per output from global memory (starter: the coalesced rung)",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)

// tensor_core: rung 8, fp16 and bf16 on the tensor cores. Over warptile (a block tile cut into
// warp tiles, each thread holding a piece of its warp's outputs in registers): the products are
// done by mma.sync.m16n8k16 (a warp multiplies a 16 x 16 tile of A by a 16 x 8 tile of B in one
// instruction, products summed in float), with the operands in 16 bits:
// - a 256 x 128 block tile, BK = 64, 8 warps as 4 x 2 warp tiles of 64 x 64 (4 x 8 mma tiles, 128
//   float accumulators per thread); outputs rounded once to fp16/bf16 at the end;
// - tiles kept in shared memory as they lie in global memory (rows padded by 16 bytes, so the 8
//   row addresses of each ldmatrix phase fall in 8 different bank groups); ldmatrix loads the
//   mma fragments, with .trans where the tile runs the other way (a transposed A, a B as stored):
//   no transposition in the copy, so the backward's N/T and T/N GEMMs cost what the forward does;
// - global -> shared by cp.async, 16 bytes (8 values) per copy, three stages (159 KiB of dynamic
//   shared memory): tiles t + 1 and t + 2 are in flight while tile t is multiplied; the copies of
//   a tile past the matrix's edge read nothing and fill zeros;
// - the fragments double-buffered in registers: slice kk + 1's ldmatrix (or the next tile's first)
//   is issued before slice kk's mma.sync, and the one barrier per tile sits in its last slice;
// - blocks ordered in groups of 8 tile rows (matmul::block_tile), so the blocks resident at once
//   share their rows of A and columns of B in L2.
// Route: cp.async needs every row of A, B and C to be whole, aligned 16-byte vectors (leading
// dimensions and contiguous extents multiples of 8: matmul::vector_route<8>); otherwise the same
// kernel, with a smaller plan (128 x 128 x 32, two stages, no prefetch: its copies go through
// registers), stages its tiles one value at a time. Tails past m, n, k are zeros in and nothing
// out in both routes: any size. Float accumulation in a fixed order: deterministic. Needs sm_80+.
// Predicted: siboehm's ladder stops at warptile (93.7% of cuBLAS's float32 GEMM on an A6000);
// tensor cores give the H100 ~15x the float32 CUDA-core peak in bf16, but mma.sync reaches about
// two thirds of what Hopper's wgmma (cuBLAS's path) does and this kernel has neither its deeper
// pipeline nor TMA: expect ~40-60% of cuBLAS's bf16 GEMM at 4096^3, several times warptile.
// The first plan (128 x 128 x 32, 64 x 32 warp tiles, two stages, no prefetch) measured 0.40x
// (results/gpu/2b4b1ce). The sweeps (scripts/matmul_tune.cu; results/gpu/{fa4c5ae,b0fc114,
// c03337b,e95e383,db361e8}/matmul_tune.log, bf16 4096^3): prefetched fragments are what paid,
// 0.44 -> 0.36 ms on 128 x 256 x 64 tiles; more stages, BK = 128 with two stages (0.45 ms),
// 16 warps of 128 registers (0.43-0.49 ms, small spills) and 192 x 256 tiles (spill: 0.47-1.0
// ms) did not. ptxas: 236 registers, no spills: one block (8 warps) an SM.
// Measured (results/gpu/c4f8664, H100, fwd): bfloat16 4096^3 0.359 ms, 383 TFLOP/s, 0.49x cuBLAS
// (0.50x torch.compile's cuBLAS call); bfloat16 8192^3 2.631 ms, 418 TFLOP/s, 0.60x; float16
// 4096^3 0.358 ms, 384 TFLOP/s, 0.59x; float16 8192^3 2.674 ms, 411 TFLOP/s, 0.60x. cuBLAS's own
// bf16 time at 4096^3 moves between calls and machines (0.177-0.202 ms in the runs above, ours
// 0.354-0.362 ms), so the 0.50x of the issue is met or missed by that spread. Why not more (Nsight
// Compute, results/gpu/c03337b/ncu_tensor_core.txt): the tensor pipe is busy 69% of the time and
// L2 73%, with 2 warps per scheduler of which 0.42 are eligible on average; reaching cuBLAS takes
// wgmma (a whole warpgroup per instruction, operands straight from shared memory) and TMA.
#include "gemm.cuh"
#include "ptx.cuh"

namespace {

constexpr int kPad = 8;  // 16 bytes of 16-bit values per shared row

// A tensor-core plan: the BM x BN block tile (BK deep) cut into WM x WN warp tiles of 16 x 8 mma
// tiles; STAGES tiles of A and B in flight through cp.async; GROUP tile rows per group of blocks
// (matmul::block_tile); PREFETCH: the fragments double-buffered in registers (the kernel says how).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, int GROUP_ = 8, bool PREFETCH_ = true>
struct Plan {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, kStages = STAGES_, kGroup = GROUP_;
  static constexpr bool kPrefetch = PREFETCH_;
  static constexpr int MT = WM / 16, NT = WN / 8;  // mma tiles per warp
  static constexpr int kThreads = 32 * (BM / WM) * (BN / WN);
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0 && kStages >= 2, "whole ldmatrix_x4 blocks, two stages or more");
};

// An operand's tile in shared memory: laid out as in global memory (element (kk, x) at
// kk * SK + x * SX, contiguous along x when X_CONTIG), rows padded.
template <int BK, int BX, bool X_CONTIG>
struct Smem {
  static constexpr int SK = X_CONTIG ? BX + kPad : 1, SX = X_CONTIG ? 1 : BK + kPad;
  static constexpr int kSize = X_CONTIG ? BK * (BX + kPad) : BX * (BK + kPad);
};

// The row address this lane gives ldmatrix_x4 for the 16 x 16 (k x x) block at (kk, x) of a tile:
// matrix i of the four is the 8 x 8 quarter at k + 8 * (i / 2) (A's order: a0..a3 of mma.sync) or
// k + 8 * (i % 2) (B's order: b0, b1 of two 8-wide tiles), x + 8 * (the other bit of i). A tile
// contiguous along x is read in transposed rows (ldmatrix .trans).
template <class S, bool X_CONTIG, bool A_ORDER, typename T>
__device__ __forceinline__ const T* fragment_row(const T* s, int kk, int x, int lane) {
  const int i = lane / 8, r = lane % 8;
  const int k_half = A_ORDER ? i / 2 : i % 2, x_half = A_ORDER ? i % 2 : i / 2;
  // a lane names a row of its matrix: along x for a tile contiguous in k, along k otherwise
  return X_CONTIG ? s + (kk + 8 * k_half + r) * S::SK + (x + 8 * x_half) * S::SX
                  : s + (kk + 8 * k_half) * S::SK + (x + 8 * x_half + r) * S::SX;
}

// The shared memory a plan's kernel needs (dynamic: beyond the 48 KiB of static shared memory).
template <class P, bool TA, bool TB>
constexpr int smem_bytes() {
  return P::kStages * (Smem<P::BK, P::BM, TA>::kSize + Smem<P::BK, P::BN, !TB>::kSize) * 2;
}

template <class P, typename T, bool TA, bool TB, bool ASYNC>
__global__ void __launch_bounds__(P::kThreads) tensor_core_kernel(matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n) {
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, MT = P::MT, NT = P::NT, kStages = P::kStages;
  using SA = Smem<BK, BM, TA>;   // A: x along m, contiguous along m when transposed
  using SB = Smem<BK, BN, !TB>;  // B: x along n, contiguous along n as stored
  constexpr int V = ASYNC ? 8 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const sa = reinterpret_cast<T*>(smem);     // kStages tiles of A, then kStages of B
  T* const sb = sa + kStages * SA::kSize;
  int64_t row0, col0;
  matmul::block_tile<BM, BN, P::kGroup>(tiles_m, tiles_n, &row0, &col0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = warp / (BN / P::WN) * P::WM, wn0 = warp % (BN / P::WN) * P::WN;  // the warp tile in the block tile
  const matmul::TileLoader<T, BK, BM, P::kThreads, V, TA, SA::SK, SA::SX> load_a(g.a, g.lda, row0, g.m, tid);
  const matmul::TileLoader<T, BK, BN, P::kThreads, V, !TB, SB::SK, SB::SX> load_b(g.b, g.ldb, col0, g.n, tid);
  const int64_t k_tiles = (g.k + BK - 1) / BK;
  // Tile t into stage t % kStages, as one cp.async group (an empty group past the last tile keeps
  // the count of groups uniform for cp_async_wait).
  auto stage = [&](int64_t t) {
    if (t < k_tiles) {
      const int s = static_cast<int>(t % kStages);
      if constexpr (ASYNC) {
        const auto copy = [](T* dst, const T* src, bool in) { matmul::ptx::cp_async_16(dst, src, in ? 16 : 0); };
        load_a.for_each(t * BK, g.k, sa + s * SA::kSize, copy);
        load_b.for_each(t * BK, g.k, sb + s * SB::kSize, copy);
      } else {
        load_a.load(t * BK, g.k, sa + s * SA::kSize);
        load_b.load(t * BK, g.k, sb + s * SB::kSize);
      }
    }
    matmul::ptx::cp_async_commit();
  };

  // The fragments of the 16-deep slice kk of a stage: MT 16 x 16 blocks of A, NT 16 x 8 of B.
  struct Fragments {
    uint32_t a[MT][4], b[NT][2];
  };
  auto load_fragments = [&](Fragments& f, int64_t t, int kk) {
    const T* a = sa + static_cast<int>(t % kStages) * SA::kSize;
    const T* b = sb + static_cast<int>(t % kStages) * SB::kSize;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      matmul::ptx::ldmatrix_x4<TA>(f.a[mt], fragment_row<SA, TA, true>(a, kk, wm0 + mt * 16, lane));
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t r[4];
      matmul::ptx::ldmatrix_x4<!TB>(r, fragment_row<SB, !TB, false>(b, kk, wn0 + nt * 8, lane));
      f.b[nt][0] = r[0], f.b[nt][1] = r[1], f.b[nt + 1][0] = r[2], f.b[nt + 1][1] = r[3];
    }
  };

  float acc[MT][NT][4] = {};
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) stage(t);
  // The one-value route holds its tile copies in registers too: no room for a second set of fragments.
  if constexpr (!(P::kPrefetch && ASYNC)) {
    for (int64_t t = 0; t < k_tiles; ++t) {
      matmul::ptx::cp_async_wait<kStages - 2>();  // tiles up to t have landed (this thread's copies)
      __syncthreads();  // ... everyone's; and everyone is done with tile t - 1, whose stage is refilled next
      stage(t + kStages - 1);
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        Fragments f;
        load_fragments(f, t, kk);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) matmul::ptx::mma_16816<T>(acc[mt][nt], f.a[mt], f.b[nt]);
      }
    }
  } else {
    // Fragments double-buffered: slice kk + 1 (or the next tile's first) is read from shared
    // memory while slice kk is multiplied, so no mma waits on an ldmatrix, not even after the
    // barrier. The barrier moves into the last slice of a tile: by then every warp has read that
    // tile's fragments, so the stage the next tile's copies refill is free; those copies are
    // issued after the first slice's reads, behind which they would otherwise sit (the compiler
    // keeps shared-memory writes and reads in program order).
    constexpr int kSlices = BK / 16;
    static_assert(kSlices >= 2, "the prefetching loop needs BK >= 32");
    Fragments f[2];
    matmul::ptx::cp_async_wait<kStages - 2>();
    __syncthreads();
    load_fragments(f[0], 0, 0);
    for (int64_t t = 0; t < k_tiles; ++t) {
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        if (s == kSlices - 1) {
          matmul::ptx::cp_async_wait<kStages - 2>();  // tile t + 1 has landed (this thread's copies)
          __syncthreads();  // ... everyone's; everyone has read tile t's fragments
        }
        if (s < kSlices - 1) load_fragments(f[(s + 1) % 2], t, (s + 1) * 16);
        else if (t + 1 < k_tiles) load_fragments(f[(s + 1) % 2], t + 1, 0);
        if (s == 0) stage(t + kStages - 1);  // into tile t - 1's stage: read before the last barrier
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) matmul::ptx::mma_16816<T>(acc[mt][nt], f[s % 2].a[mt], f[s % 2].b[nt]);
      }
    }
  }
  // Lane (g, t) holds D[g][2t, 2t + 1] and D[g + 8][2t, 2t + 1] of each 16 x 8 mma tile.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        matmul::store_run<2, ASYNC ? 2 : 1>(g, row0 + wm0 + mt * 16 + lane / 4 + 8 * h,
                                            col0 + wn0 + nt * 8 + lane % 4 * 2, &acc[mt][nt][2 * h]);
}

// The rung's GEMM: plan P on the cp.async route (scripts/matmul_tune.cu times other plans through
// it); the one-value route, which stages its copies in registers, takes the smaller plan Q.
template <class P, class Q = Plan<128, 128, 32, 64, 32, 2, 8, false>>
struct Tiled {
  static constexpr unsigned kDtypes = WB_F16 | WB_BF16;
  template <class R, typename T, bool TA, bool TB, bool ASYNC>
  static int run(const matmul::Gemm<T>& g, cudaStream_t s) {
    const int64_t tm = matmul::tiles(g.m, R::BM), tn = matmul::tiles(g.n, R::BN);
    return matmul::launch_smem<tensor_core_kernel<R, T, TA, TB, ASYNC>>(tm * tn, dim3(R::kThreads),
                                                                        smem_bytes<R, TA, TB>(), s, g, tm, tn);
  }
  template <typename T, bool TA, bool TB>
  static int gemm(const matmul::Gemm<T>& g, cudaStream_t s) {
    return matmul::vector_route<8, TA, TB>(g) ? run<P, T, TA, TB, true>(g, s) : run<Q, T, TA, TB, false>(g, s);
  }
};

// Picked from results/gpu/fa4c5ae/matmul_tune.log: the fastest plan at 4096^3 and 8192^3 (bf16).
using Rung = Tiled<Plan<256, 128, 64, 64, 64, 3>>;

}  // namespace

#ifndef WB_MATMUL_TUNING
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "rung 8: tensor cores (mma.sync m16n8k16, float accumulation), 256 x 128 x 64 block tile, "
                  "64 x 64 warp tiles, double-buffered ldmatrix fragments, three-stage cp.async; one value at "
                  "a time through registers where rows are not whole aligned 16-byte vectors; fp16 and bf16",
                  matmul::Variant<Rung>::launchers, wb_cuda_status_string)
#endif

// Exercise 07 (a TMA + mbarrier pipeline) - a solution.
//
// matmul (C = op(A) @ op(B)) for float16 and bfloat16 on a Hopper GPU (sm_90a), forward and
// backward, any m, k, n. The multiply is the starter's: wgmma.mma_async m64n128k16 from 128-byte
// swizzled shared memory, a 128 x 128 block tile, BK = 64, two warpgroups of 64 x 128. The tiles
// now come by TMA: thread 0 asks the copy engine for each tile's 2-D boxes (cp.async.bulk.tensor,
// through the tensor maps the host encodes with make_maps), and the engine writes them in the
// swizzle wgmma reads, zeros past the matrix's edges, and counts the bytes it delivered on the
// stage's mbarrier. Four stages: tiles t + 1 .. t + 3 are in flight while tile t is multiplied.
// - a stage's barrier completes a phase when its one arrival (thread 0's mbarrier.arrive.expect_tx,
//   which also announces the stage's bytes) and all those bytes are in: the phase tile t of a
//   stage completes is its (t / kStages)-th, so the waiters test parity (t / kStages) & 1;
// - after the wgmmas of tile t, everyone meets at __syncthreads(): both warpgroups are done
//   reading stage t % kStages, and thread 0 refills it with tile t + kStages.
// This is the `wgmma_tma` rung (kernels/matmul/wgmma_tma.cu). Its next step, warp_specialized,
// gives the loads a warpgroup of their own and hands stages over on "empty" barriers instead of
// __syncthreads, so the tensor cores no longer pause while the slowest warp arrives.
#include "hopper.cuh"

// WB_NEEDS_SM90A: the workbench builds this file for sm_90a where its arch list has 9.0
// (workbench/build/toolchain.py variant_arch_flags); keep this line in your copy.

namespace {

using namespace matmul::hopper;

constexpr int BM = 128, BN = 128, kThreads = 256, kStages = 4;
constexpr int kStageA = BM * BK * 2, kStageB = BN * BK * 2;  // bytes of one tile of A, of B (16-bit values)
constexpr int kSmem = kStages * (kStageA + kStageB) + 1024 /* alignment */ + kStages * 8 /* barriers */;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads) tma_pipeline_kernel(const __grid_constant__ CUtensorMap map_a,
                                                                const __grid_constant__ CUtensorMap map_b,
                                                                matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n,
                                                                bool pairs) {
#ifdef WB_HOPPER_DEVICE
  extern __shared__ unsigned char raw[];
  unsigned char* smem = raw + ((1024 - smem_u32(raw) % 1024) % 1024);  // the swizzle wants 1024-byte alignment
  unsigned char* sa = smem;                      // kStages tiles of A
  unsigned char* sb = smem + kStages * kStageA;  // then kStages of B
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + kStages * kStageB);  // then a barrier per stage
  const int tid = threadIdx.x, wg = tid / 128;
  int64_t row0, col0;
  matmul::block_tile<BM, BN, 8>(tiles_m, tiles_n, &row0, &col0);
  const int64_t k_tiles = (g.k + BK - 1) / BK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1);
    mbar_fence_init();  // the barriers, visible to the TMA unit
  }
  __syncthreads();  // nobody waits on a barrier before it exists
  auto issue = [&](int64_t t) {  // tile t of k into its stage, by TMA
    const int s = static_cast<int>(t % kStages);
    mbar_expect_tx(&full[s], kStageA + kStageB);
    load_tile<BM, !TA>(sa + s * kStageA, &map_a, row0, t * BK, &full[s]);
    load_tile<BN, TB>(sb + s * kStageB, &map_b, col0, t * BK, &full[s]);
  };
  if (tid == 0)
    for (int64_t t = 0; t < kStages && t < k_tiles; ++t) issue(t);

  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
  for (int64_t t = 0; t < k_tiles; ++t) {
    const int s = static_cast<int>(t % kStages);
    mbar_wait(&full[s], static_cast<uint32_t>(t / kStages) & 1);  // tile t has arrived
    const uint32_t a = smem_u32(sa + s * kStageA), b = smem_u32(sb + s * kStageB);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16)
      Wgmma<BN, T>::template mma<TA, !TB>(d, operand_desc<!TA>(a, 64 * wg, kk), operand_desc<TB>(b, 0, kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    __syncthreads();  // every warpgroup is done reading stage s
    if (tid == 0 && t + kStages < k_tiles) issue(t + kStages);
  }
  store_acc<BN>(g, d, row0 + 64 * wg, col0, tid % 128, pairs);
#elif defined(__CUDA_ARCH__)
  __trap();  // no sm_90a code in this build (an arch list without 9.0): fail loudly, never return garbage
#endif
}

struct Rung {
  template <typename T, bool TA, bool TB>
  static int run(const matmul::Gemm<T>& g, cudaStream_t s) {
    CUtensorMap ma, mb;
    const int status = make_maps<BM, BN, TA, TB>(g, &ma, &mb);
    if (status != WB_OK) return status;
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    return launch<tma_pipeline_kernel<T, TA, TB>>(tm * tn, kThreads, kSmem, s, ma, mb, g, tm, tn, pair_stores(g));
  }
};

WB_HOPPER_STATUS_STRING(exercise07_status, "exercise 07")

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "exercise 07 (sm_90a): TMA tile loads on mbarriers, four stages, wgmma from 128-byte swizzled "
                  "shared memory; operands TMA cannot address go to tensor_core's kernel",
                  matmul::Variant<matmul::hopper::Route<Rung>>::launchers, exercise07_status)

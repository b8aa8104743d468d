// warp_specialized: rung 10, producer and consumer warpgroups (sm_90a), fp16 and bf16. Over
// wgmma_tma (every warp multiplies, thread 0 also issues the loads, and all threads meet at a
// barrier after each tile of k before its stage is refilled): the warpgroups take roles, and
// mbarriers, not __syncthreads, hand the stages between them:
// - three warpgroups: a producer (one thread issues every TMA load) and two consumers, each
//   multiplying 64 x 256 of a 128 x 256 block tile (wgmma m64n256k16, 128 float accumulators a
//   thread), BK = 64, four stages of 48 KiB;
// - per stage a "full" barrier (the producer's expected byte count, completed by the TMA unit)
//   and an "empty" one (one arrival from each consumer warpgroup once its wgmmas have read the
//   stage): the producer refills a stage as soon as both consumers are done with it, without
//   waiting for anyone else, and runs up to four tiles of k ahead;
// - setmaxnreg: the producer gives its registers back (40 a thread) and the consumers take them
//   (232), so the larger 128 x 256 tile's accumulators fit beside their addressing without spills
//   (__launch_bounds__(384, 1) caps the kernel at 168 at entry).
// Each consumer still ends a tile's wgmmas (wait_group 0) before it releases the stage and waits
// for the next: its tensor-core work pauses once per tile of k (the other consumer's may fill it).
// Route and refusal as wgmma_tma (hopper.cuh): operands TMA cannot address go to tensor_core's
// kernel; a device other than compute capability 9.0 gets "warp_specialized needs an sm_90a GPU
// (Hopper)". Float accumulation in a fixed order: deterministic.
// Predicted: fast.cu measured producer/consumer specialisation with setmaxnreg at 80% of cuBLAS on
// the H100 (from 61% for its WGMMA + TMA kernel): from wgmma_tma's ~0.6-0.7x to ~0.8x here.
// Measured (results/gpu/3efe340, H100, fwd, python3 -m workbench bench against torch.matmul's cuBLAS
// in the same run): bfloat16 4096^3 0.212 ms, 649 TFLOP/s, 0.88x cuBLAS; bfloat16 8192^3 1.487 ms,
// 739 TFLOP/s, 0.93x cuBLAS; bfloat16 16384x4096x4096 0.791 ms, 695 TFLOP/s, 0.90x cuBLAS; bfloat16
// 8192x8192x28672 5.402 ms, 712 TFLOP/s, 0.88x cuBLAS; bfloat16 512x4096x512 0.045 ms, 48 TFLOP/s,
// 0.25x cuBLAS; float16 4096^3 0.212 ms, 647 TFLOP/s, 0.90x cuBLAS; float16 8192^3 1.561 ms, 704
// TFLOP/s, 0.92x cuBLAS; float16 16384x4096x4096 0.847 ms, 649 TFLOP/s, 0.87x cuBLAS; float16
// 8192x8192x28672 5.463 ms, 704 TFLOP/s, 0.91x cuBLAS; float16 512x4096x512 0.045 ms, 48 TFLOP/s,
// 0.25x cuBLAS.
// Why (Nsight Compute, results/gpu/3efe340/ncu_hopper.txt, bf16 8192^3): SM Busy (the tensor pipe)
// 88.0%, from wgmma_tma's 57.8%; L2 76%. At 512x4096x512 the grid is 8 blocks of 128 x 256 on 132
// SMs: 0.25x (wgmma_tma's smaller tiles, 16 blocks, do better there).
#include "hopper.cuh"

// WB_NEEDS_SM90A: the workbench builds this file for sm_90a where its arch list has 9.0
// (workbench/build/toolchain.py variant_arch_flags), and skips it on other GPUs.

namespace {

using namespace matmul::hopper;

constexpr int BM = 128, BN = 256, kStages = 4, kThreads = 384;
constexpr int kStageA = BM * BK * 2, kStageB = BN * BK * 2;
constexpr int kSmem = kStages * (kStageA + kStageB) + 1024 /* alignment */ + 2 * kStages * 8 /* barriers */;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads, 1) warp_specialized_kernel(const __grid_constant__ CUtensorMap map_a,
                                                                       const __grid_constant__ CUtensorMap map_b,
                                                                       matmul::Gemm<T> g, int64_t tiles_m,
                                                                       int64_t tiles_n, bool pairs) {
#ifdef WB_HOPPER_DEVICE
  extern __shared__ unsigned char raw[];
  unsigned char* smem = raw + ((1024 - smem_u32(raw) % 1024) % 1024);
  unsigned char* sa = smem;
  unsigned char* sb = smem + kStages * kStageA;
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + kStages * kStageB);
  uint64_t* empty = full + kStages;
  const int tid = threadIdx.x, wg = tid / 128;
  int64_t row0, col0;
  matmul::block_tile<BM, BN, 8>(tiles_m, tiles_n, &row0, &col0);
  const int64_t k_tiles = (g.k + BK - 1) / BK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);  // one arrival per consumer warpgroup
    }
    mbar_fence_init();
  }
  __syncthreads();
  if (wg == 0) {  // the producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      for (int64_t t = 0; t < k_tiles; ++t) {
        const int s = static_cast<int>(t % kStages);
        if (t >= kStages) mbar_wait(&empty[s], static_cast<uint32_t>(t / kStages - 1) & 1);
        mbar_expect_tx(&full[s], kStageA + kStageB);
        load_tile<BM, !TA>(sa + s * kStageA, &map_a, row0, t * BK, &full[s]);
        load_tile<BN, TB>(sb + s * kStageB, &map_b, col0, t * BK, &full[s]);
      }
    }
  } else {  // consumers 1 and 2: rows 64 (wg - 1) .. of the block tile
    setmaxnreg_inc<232>();
    const int c = wg - 1;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
    for (int64_t t = 0; t < k_tiles; ++t) {
      const int s = static_cast<int>(t % kStages);
      mbar_wait(&full[s], static_cast<uint32_t>(t / kStages) & 1);
      const uint32_t a = smem_u32(sa + s * kStageA), b = smem_u32(sb + s * kStageB);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16)
        Wgmma<BN, T>::template mma<TA, !TB>(d, operand_desc<!TA>(a, 64 * c, kk), operand_desc<TB>(b, 0, kk), 1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(d);
      if (tid % 128 == 0) mbar_arrive(&empty[s]);
    }
    store_acc<BN>(g, d, row0 + 64 * c, col0, tid % 128, pairs);
  }
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
    return launch<warp_specialized_kernel<T, TA, TB>>(tm * tn, kThreads, kSmem, s, ma, mb, g, tm, tn, pair_stores(g));
  }
};

WB_HOPPER_STATUS_STRING(warp_specialized_status, "warp_specialized")

}  // namespace

#ifndef WB_MATMUL_TUNING
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "rung 10 (sm_90a): a producer warpgroup issuing TMA and two consumer warpgroups of wgmma "
                  "m64n256k16, 128 x 256 x 64 tiles, four stages handed over by full/empty mbarriers, setmaxnreg "
                  "40/232; operands TMA cannot address go to tensor_core's kernel; fp16 and bf16",
                  matmul::Variant<matmul::hopper::Route<Rung>>::launchers, warp_specialized_status)
#endif

// wgmma_tma: rung 9, Hopper's own tensor-core path (sm_90a), fp16 and bf16. Over tensor_core
// (mma.sync fed by cp.async and ldmatrix, a warp's 16 x 8 product per instruction): the operands go
// from global to shared memory by TMA and from shared memory to the tensor cores by wgmma, with no
// thread touching a value of A or B on the way:
// - TMA (cp.async.bulk.tensor): one thread asks the copy engine for a whole 2-D box of a tile,
//   completing on an mbarrier with its byte count; zeros come in past every edge of the matrix, so
//   the tails of m, n and k need no code; the box lands in the 128-byte swizzle wgmma reads
//   without bank conflicts (hopper.cuh: the layout, K-major or MN-major per operand);
// - wgmma.mma_async m64n128k16: a warpgroup (4 warps) multiplies a 64 x 16 tile of A by a 16 x 128
//   tile of B, both read from shared memory through descriptors; transposed operands are read as
//   MN-major (imm-trans), so the backward's N/T and T/N GEMMs cost what the forward does;
// - a 128 x 128 block tile, BK = 64, two warpgroups of 64 x 128 (64 float accumulators a thread);
//   four stages: thread 0 keeps tiles t + 1 .. t + 3 in flight while tile t is multiplied, then
//   all threads wait for their wgmmas and meet at a barrier before the stage is refilled.
// Everything is issued by every warp: no producer/consumer split yet (warp_specialized), and the
// wgmmas of a tile end (wgmma.wait_group 0) before the barrier, so the tensor pipe idles while the
// slowest warp arrives and the refill is issued.
// Route: TMA needs 16-byte aligned bases and row strides (leading dimensions multiples of 8) and
// coordinates in int32; other operands (odd k or n, offset views) go to tensor_core's kernel, which
// takes any size and alignment. Declines on a device other than compute capability 9.0 (status
// "wgmma_tma needs an sm_90a GPU (Hopper)"). Float accumulation in a fixed order: deterministic.
// Predicted: the public Hopper ladder (pranjalssh/fast.cu) measured one warpgroup of WGMMA + TMA at
// 61% of cuBLAS on the H100; two warpgroups on a 128 x 128 tile and four stages: ~60-70% of
// cuBLAS at 4096^3 bf16, against tensor_core's 0.49x.
// Measured (results/gpu/3efe340, H100, fwd, python3 -m workbench bench against torch.matmul's cuBLAS
// in the same run): bfloat16 4096^3 0.291 ms, 473 TFLOP/s, 0.64x cuBLAS; bfloat16 8192^3 2.019 ms,
// 545 TFLOP/s, 0.69x cuBLAS; bfloat16 16384x4096x4096 1.095 ms, 502 TFLOP/s, 0.65x cuBLAS; bfloat16
// 8192x8192x28672 7.091 ms, 543 TFLOP/s, 0.67x cuBLAS; bfloat16 512x4096x512 0.036 ms, 60 TFLOP/s,
// 0.32x cuBLAS; float16 4096^3 0.293 ms, 469 TFLOP/s, 0.66x cuBLAS; float16 8192^3 2.078 ms, 529
// TFLOP/s, 0.69x cuBLAS; float16 16384x4096x4096 1.088 ms, 505 TFLOP/s, 0.68x cuBLAS; float16
// 8192x8192x28672 7.438 ms, 517 TFLOP/s, 0.67x cuBLAS; float16 512x4096x512 0.035 ms, 61 TFLOP/s,
// 0.32x cuBLAS.
// Why (Nsight Compute, results/gpu/3efe340/ncu_hopper.txt, bf16 8192^3): SM Busy (the tensor pipe)
// 57.8%, L2 67%: between a tile of k's wgmmas and the next the warpgroups wait for each other at the
// barrier and thread 0 issues the refill; warp_specialized takes the loads out of the consumers'
// way. At 512x4096x512 the grid is 16 blocks of 128 x 128 on 132 SMs (cuBLAS splits k there; this
// contract's fixed-order sums rule out an atomic split-k): 0.32x.
#include "hopper.cuh"

// WB_NEEDS_SM90A: the workbench builds this file for sm_90a where its arch list has 9.0
// (workbench/build/toolchain.py variant_arch_flags), and skips it on other GPUs.

namespace {

using namespace matmul::hopper;

constexpr int BM = 128, BN = 128, kStages = 4, kThreads = 256;
constexpr int kStageA = BM * BK * 2, kStageB = BN * BK * 2;
constexpr int kSmem = kStages * (kStageA + kStageB) + 1024 /* alignment */ + 64 /* barriers */;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads) wgmma_tma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                             const __grid_constant__ CUtensorMap map_b,
                                                             matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n,
                                                             bool pairs) {
#ifdef WB_HOPPER_DEVICE
  extern __shared__ unsigned char raw[];
  // 128-byte swizzled tiles want 1024-byte aligned stages
  unsigned char* smem = raw + ((1024 - smem_u32(raw) % 1024) % 1024);
  unsigned char* sa = smem;                       // kStages tiles of A
  unsigned char* sb = smem + kStages * kStageA;   // then kStages of B
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + kStages * kStageB);
  const int tid = threadIdx.x, wg = tid / 128;
  int64_t row0, col0;
  matmul::block_tile<BM, BN, 8>(tiles_m, tiles_n, &row0, &col0);
  const int64_t k_tiles = (g.k + BK - 1) / BK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1);
    mbar_fence_init();
  }
  __syncthreads();
  auto issue = [&](int64_t t) {  // tile t of k into its stage
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
    mbar_wait(&full[s], static_cast<uint32_t>(t / kStages) & 1);
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
    return launch<wgmma_tma_kernel<T, TA, TB>>(tm * tn, kThreads, kSmem, s, ma, mb, g, tm, tn, pair_stores(g));
  }
};

WB_HOPPER_STATUS_STRING(wgmma_tma_status, "wgmma_tma")

}  // namespace

#ifndef WB_MATMUL_TUNING
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "rung 9 (sm_90a): TMA tile loads into 128-byte swizzled shared memory, wgmma.mma_async "
                  "m64n128k16 from shared memory, 128 x 128 x 64 tiles, two warpgroups, four stages on mbarriers; "
                  "operands TMA cannot address (unaligned rows or bases) go to tensor_core's kernel; fp16 and bf16",
                  matmul::Variant<matmul::hopper::Route<Rung>>::launchers, wgmma_tma_status)
#endif

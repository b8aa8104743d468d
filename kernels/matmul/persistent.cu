// persistent: rung 11, a persistent grid of 2-block clusters sharing B by TMA multicast (sm_90a),
// fp16 and bf16. Over warp_specialized (one block per 128 x 256 tile, launched in waves, each
// loading all of its tiles itself):
// - a persistent grid: one block per SM (as many clusters as fit at once,
//   cudaOccupancyMaxActiveClusters), each walking the tiles with a stride; the producer runs on
//   into the next tile's loads while the consumers store the last one's outputs, so the pipeline
//   does not drain between tiles; the stages' mbarrier phases run on across tiles (one counter);
// - the two blocks of a cluster own the tiles above each other (rows 2i and 2i + 1 of a column):
//   each loads its own A tile and half of the shared B tile, multicast into both blocks' shared
//   memory, so an SM pulls 32 KiB a stage from L2 instead of 48; a stage's "empty" barrier then
//   takes an arrival from each consumer of both blocks (mapa + a remote arrive), since the peer's
//   producer writes into it too. The remote arrive is the default (CTA-scope) one: with
//   .release.cluster it compiled to MEMBAR.ALL.GPU before every arrival and the rung ran at half
//   speed (0.42-0.45x cuBLAS: results/gpu/c979eba/hopper_gemm_check.log, persistent_c2);
// - the clusters' tile pairs in groups of 8, down a group's rows before the next column, so the
//   clusters resident at once read a few rows of A and a few columns of B (both stay in L2).
// Tried and left as switches (scripts/hopper_gemm_check.sh TUNE=...): no cluster
// (WB_PERSISTENT_CLUSTER=1), and consumers keeping one wgmma group in flight when they release a
// stage (WB_PERSISTENT_WAIT=1: no pause per tile of k, but each stage is held a tile longer, so
// only three of the four stages are loading): in tuning runs not kept, all four within the
// run-to-run spread of each other (about +-5% on this power-capped H100) but for the cluster's
// lead at 8192 x 8192 x 28672.
// Route and refusal as wgmma_tma (hopper.cuh). Float accumulation in a fixed order: deterministic
// (each output's sum runs over k in order, whichever block computes it).
// Predicted: fast.cu measured its persistent kernel with mbarrier phases at 97% of cuBLAS and 2-CTA
// clusters with TMA multicast at 100% on the H100 (bf16, its sizes): ~0.9-1.0x here.
// Measured (results/gpu/3efe340, H100, fwd, python3 -m workbench bench against torch.matmul's cuBLAS
// in the same run): bfloat16 4096^3 0.220 ms, 624 TFLOP/s, 0.85x cuBLAS; bfloat16 8192^3 1.462 ms,
// 752 TFLOP/s, 0.95x cuBLAS; bfloat16 16384x4096x4096 0.789 ms, 697 TFLOP/s, 0.90x cuBLAS; bfloat16
// 8192x8192x28672 5.201 ms, 740 TFLOP/s, 0.92x cuBLAS; bfloat16 512x4096x512 0.047 ms, 46 TFLOP/s,
// 0.24x cuBLAS; float16 4096^3 0.213 ms, 645 TFLOP/s, 0.90x cuBLAS; float16 8192^3 1.509 ms, 728
// TFLOP/s, 0.95x cuBLAS; float16 16384x4096x4096 0.806 ms, 682 TFLOP/s, 0.91x cuBLAS; float16
// 8192x8192x28672 5.406 ms, 712 TFLOP/s, 0.92x cuBLAS; float16 512x4096x512 0.047 ms, 46 TFLOP/s,
// 0.24x cuBLAS.
// Why (Nsight Compute, results/gpu/3efe340/ncu_hopper.txt, bf16 8192^3): SM Busy (the tensor pipe)
// 88.1%, as warp_specialized's 88.0%; L2 64% against its 76% (the multicast halves B's traffic),
// which is why the LLM shape gains most. Against the goal: 0.95x at 8192^3 in both dtypes and
// 0.90-0.92x at 16384x4096x4096 and 8192x8192x28672 (the 0.9x goal) are met in this run, 4096^3
// (0.85x bf16, 0.90x fp16) is not; runs on this power-capped H100 move by +-5%
// (results/gpu/3efe340/hopper_gemm_check.log: 0.93x / 0.91x at 4096^3 beside cublasGemmEx).
// At 512x4096x512: 4 clusters of 128 x 256 tile pairs on 132 SMs, 0.24x.
// Next step, from the profile: the tensor pipe idles 12% of the time, in two places the consumers
// leave it: at each tile of k both consumers drain their wgmmas (wait_group 0) before they release
// the stage, and at each tile both store their outputs from registers while no wgmma runs. Keeping
// one group in flight (WB_PERSISTENT_WAIT=1) holds a stage longer and starves the loads with four
// 48 KiB stages; it wants more, smaller stages (BK = 32, a 64-byte swizzle for the K-major
// operands). The epilogue wants to leave through stmatrix into shared memory and a TMA store while
// the next tile's wgmmas run: consumer warpgroups taking alternate tiles (CUTLASS's ping-pong
// schedule) so that one stores while the other multiplies.
#include "hopper.cuh"

// WB_NEEDS_SM90A: the workbench builds this file for sm_90a where its arch list has 9.0
// (workbench/build/toolchain.py variant_arch_flags), and skips it on other GPUs.

#ifndef WB_PERSISTENT_WAIT
#define WB_PERSISTENT_WAIT 0  // wgmma groups a consumer keeps in flight when it releases a stage (0 or 1)
#endif
#ifndef WB_PERSISTENT_CLUSTER
#define WB_PERSISTENT_CLUSTER 2  // blocks a cluster (1: each block loads all of B itself)
#endif

namespace {

using namespace matmul::hopper;

constexpr int BM = 128, BN = 256, kStages = 4, kThreads = 384, kGroup = 8, kCluster = WB_PERSISTENT_CLUSTER;
constexpr int kStageA = BM * BK * 2, kStageB = BN * BK * 2;
constexpr int kSmem = kStages * (kStageA + kStageB) + 1024 /* alignment */ + 2 * kStages * 8 /* barriers */;
static_assert(kCluster == 1 || kCluster == 2, "one block or a pair");

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads, 1) persistent_kernel(const __grid_constant__ CUtensorMap map_a,
                                                                 const __grid_constant__ CUtensorMap map_b,
                                                                 matmul::Gemm<T> g, int64_t tiles_m, int64_t tiles_n,
                                                                 bool pairs) {
#ifdef WB_HOPPER_DEVICE
  extern __shared__ unsigned char raw[];
  unsigned char* smem = raw + ((1024 - smem_u32(raw) % 1024) % 1024);  // the same offset in every block
  unsigned char* sa = smem;
  unsigned char* sb = smem + kStages * kStageA;
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + kStages * kStageB);
  uint64_t* empty = full + kStages;
  const int tid = threadIdx.x, wg = tid / 128;
  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0;
  // The work: pairs of tiles (rows 2i, 2i + 1 of one column) for a cluster of two, tiles for one.
  const int64_t super_m = (tiles_m + kCluster - 1) / kCluster, units = super_m * tiles_n;
  const int64_t clusters = gridDim.x / kCluster, first = blockIdx.x / kCluster;
  const int64_t k_tiles = (g.k + BK - 1) / BK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2 * kCluster);  // each consumer warpgroup of each block of the cluster
    }
    mbar_fence_init();
  }
  if (kCluster > 1) cluster_sync();  // the peer's barriers are initialised before anything lands in them
  else __syncthreads();
  if (wg == 0) {  // the producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int64_t it = 0;  // tiles of k issued, over every unit: the stage and its phase
      for (int64_t u = first; u < units; u += clusters) {
        int64_t row0, col0;
        tile_at<BM * kCluster, BN, kGroup>(u, super_m, tiles_n, &row0, &col0);
        row0 += rank * BM;
        for (int64_t t = 0; t < k_tiles; ++t, ++it) {
          const int s = static_cast<int>(it % kStages);
          if (it >= kStages) mbar_wait(&empty[s], static_cast<uint32_t>(it / kStages - 1) & 1);
          mbar_expect_tx(&full[s], kStageA + kStageB);
          load_tile<BM, !TA>(sa + s * kStageA, &map_a, row0, t * BK, &full[s]);
          if constexpr (kCluster == 1) {
            load_tile<BN, TB>(sb + s * kStageB, &map_b, col0, t * BK, &full[s]);
          } else {  // our half of B, into both blocks
            load_tile_multicast<BN / 2, TB>(sb + s * kStageB + rank * (kStageB / 2), &map_b, col0 + rank * (BN / 2),
                                            t * BK, &full[s], 0x3);
          }
        }
      }
    }
    __syncwarp();  // lane 0 rejoins its warp before the cluster barrier (.aligned)
  } else {  // consumers 1 and 2: rows 64 (wg - 1) .. of the block's tile
    setmaxnreg_inc<232>();
    const int c = wg - 1;
    int64_t it = 0;
    float d[BN / 2];
    for (int64_t u = first; u < units; u += clusters) {
      int64_t row0, col0;
      tile_at<BM * kCluster, BN, kGroup>(u, super_m, tiles_n, &row0, &col0);
      row0 += rank * BM;
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
      auto release = [&](int64_t i) {  // stage of tile of k number i: read by this warpgroup
        if (tid % 128 == 0) {
          if constexpr (kCluster == 1) {
            mbar_arrive(&empty[i % kStages]);
          } else {
            mbar_arrive_cluster(&empty[i % kStages], 0);
            mbar_arrive_cluster(&empty[i % kStages], 1);
          }
        }
      };
      for (int64_t t = 0; t < k_tiles; ++t, ++it) {
        const int s = static_cast<int>(it % kStages);
        mbar_wait(&full[s], static_cast<uint32_t>(it / kStages) & 1);
        const uint32_t a = smem_u32(sa + s * kStageA), b = smem_u32(sb + s * kStageB);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16)
          Wgmma<BN, T>::template mma<TA, !TB>(d, operand_desc<!TA>(a, 64 * c, kk), operand_desc<TB>(b, 0, kk), 1);
        wgmma_commit();
        if constexpr (WB_PERSISTENT_WAIT == 1) {
          wgmma_wait<1>();  // tile t - 1's group is done: its stage can go back
          if (t > 0) release(it - 1);
        } else {
          wgmma_wait<0>();
          fence_regs(d);
          release(it);
        }
      }
      wgmma_wait<0>();
      fence_regs(d);
      if constexpr (WB_PERSISTENT_WAIT == 1) release(it - 1);
      store_acc<BN>(g, d, row0 + 64 * c, col0, tid % 128, pairs);
    }
  }
  if (kCluster > 1) cluster_sync();  // no block leaves while its peer may still write into it
#elif defined(__CUDA_ARCH__)
  __trap();  // no sm_90a code in this build (an arch list without 9.0): fail loudly, never return garbage
#endif
}

template <typename T, bool TA, bool TB>
int max_clusters(int smem) {  // clusters resident at once, asked once per device
  static std::atomic<int> known[64];
  int device = 0;
  cudaGetDevice(&device);
  if (device < 64 && known[device].load() > 0) return known[device].load();
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int n = sms / kCluster;
  if (kCluster > 1) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(sms / kCluster * kCluster);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim = {kCluster, 1, 1};
    config.attrs = attr;
    config.numAttrs = 1;
    int found = 0;
    if (cudaFuncSetAttribute(persistent_kernel<T, TA, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) ==
            cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&found, persistent_kernel<T, TA, TB>, &config) == cudaSuccess && found > 0)
      n = found;
    (void)cudaGetLastError();
  }
  if (n < 1) n = 1;
  if (device < 64) known[device].store(n);
  return n;
}

struct Rung {
  template <typename T, bool TA, bool TB>
  static int run(const matmul::Gemm<T>& g, cudaStream_t s) {
    CUtensorMap ma, mb;
    const int status = make_maps<BM, kCluster == 1 ? BN : BN / 2, TA, TB>(g, &ma, &mb);
    if (status != WB_OK) return status;
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    const int64_t units = (tm + kCluster - 1) / kCluster * tn;
    const int64_t clusters = std::min<int64_t>(max_clusters<T, TA, TB>(kSmem), units);
    return launch<persistent_kernel<T, TA, TB>, kCluster>(clusters * kCluster, kThreads, kSmem, s, ma, mb, g, tm, tn,
                                                          pair_stores(g));
  }
};

WB_HOPPER_STATUS_STRING(persistent_status, "persistent")

}  // namespace

#ifndef WB_MATMUL_TUNING
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "rung 11 (sm_90a): warp_specialized's 128 x 256 x 64 tiles on a persistent grid (one block an "
                  "SM), 2-block clusters sharing B by TMA multicast, tile pairs in groups of 8, the next tile's "
                  "loads under the last one's stores; operands TMA cannot address go to tensor_core's kernel; "
                  "fp16 and bf16",
                  matmul::Variant<matmul::hopper::Route<Rung>>::launchers, persistent_status)
#endif

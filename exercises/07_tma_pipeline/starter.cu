// Exercise 07 (a TMA + mbarrier pipeline) - starter.
//
// A correct matmul (C = op(A) @ op(B)) for float16 and bfloat16 on a Hopper GPU (sm_90a), forward
// and backward, any m, k, n: the multiply is the `wgmma_tma` rung's (wgmma.mma_async m64n128k16
// reading both operands from 128-byte swizzled shared memory, a 128 x 128 block tile, BK = 64, two
// warpgroups of 64 x 128), but its tiles are loaded the old way: every thread copies 16-byte
// chunks from global memory into shared memory, writing them where the 128-byte swizzle puts
// them, then __syncthreads(), then the wgmmas, then __syncthreads() again before the next tile
// overwrites the only stage. Nothing overlaps within a block: the tensor cores wait for the loads,
// the loads for the tensor cores, and the copy costs every thread ~16 instructions a chunk.
// Replace the copy with TMA (cp.async.bulk.tensor: one thread asks the copy engine for a whole
// 2-D box, the engine writes the same swizzle and zeros past the matrix's edges) completing on
// mbarriers, over several stages, so that tiles t + 1 .. t + 3 are in flight while tile t is
// multiplied. exercises/07_tma_pipeline/README.md has the why and the hints; check your copy with:
//
//     python -m workbench exercise check 7 path/to/your_copy.cu
//
// hopper.cuh (kernels/matmul/, on the include path) gives everything else: the PTX wrappers
// (mbar_init, mbar_fence_init, mbar_expect_tx, mbar_wait, load_tile: a tile by TMA, wgmma_fence,
// Wgmma<BN, T>::mma, wgmma_commit, wgmma_wait), the swizzled layout and its descriptors
// (operand_desc), the tensor maps (make_maps), the output store (store_acc), the launch (launch)
// and the route (Route: a device other than compute capability 9.0 declines by name; operands TMA
// cannot address, such as unaligned rows, go to tensor_core's kernel, so the kernel here only
// ever sees rows that are whole, 16-byte aligned chunks).
#include "hopper.cuh"

// WB_NEEDS_SM90A: the workbench builds this file for sm_90a where its arch list has 9.0
// (workbench/build/toolchain.py variant_arch_flags); keep this line in your copy.

namespace {

using namespace matmul::hopper;

constexpr int BM = 128, BN = 128, kThreads = 256;
constexpr int kStageA = BM * BK * 2, kStageB = BN * BK * 2;  // bytes of one tile of A, of B (16-bit values)
// TODO 1: kStages (4) stages of A and B, and one mbarrier (8 bytes) per stage after them.
constexpr int kSmem = kStageA + kStageB + 1024 /* alignment */;

// An operand as a TMA tensor map describes it (hopper.cuh make_map): stored row-major as
// [outer][inner] with leading dimension ld, read in boxes of 64 values (128 bytes) along inner.
template <typename T>
struct Operand {
  const T* base;
  int64_t inner, outer, ld;
};

// The first `valid` values of a chunk at the operand's edge, zeros after them. Rare (the last
// chunk of a row, the rows past the edge): kept out of line, so the common path keeps its registers.
template <typename T>
__device__ __noinline__ WbVec<T, 8> edge_chunk(const T* src, int valid) {
  WbVec<T, 8> v;
#pragma unroll
  for (int e = 0; e < 8; ++e) v.v[e] = e < valid ? src[e] : T{};
  return v;
}

// What one TMA box does, by hand: ROWS rows of 64 values of `op` from (inner0, outer0) into dst
// (1024-byte aligned) in the 128-byte swizzle: the 16-byte chunk c of row r lands at chunk
// c ^ (r % 8) of its 128-byte row, so that wgmma's reads hit every bank; zeros past the operand's
// edges (a tail of k adds nothing; a tail of m or n computes outputs that are never stored).
// Eight consecutive threads copy a row: each warp's loads are four 128-byte lines.
template <int ROWS, typename T>
__device__ __forceinline__ void copy_box(unsigned char* dst, const Operand<T>& op, int64_t inner0, int64_t outer0,
                                         int tid) {
  static_assert(ROWS * 8 % kThreads == 0, "the block's threads share the box's chunks evenly");
#pragma unroll
  for (int j = 0; j < ROWS * 8 / kThreads; ++j) {
    const int i = tid + j * kThreads, r = i / 8, c = i % 8;
    const int64_t outer = outer0 + r, inner = inner0 + 8 * c;
    const T* src = op.base + outer * op.ld + inner;
    const int64_t left = outer < op.outer ? op.inner - inner : 0;  // values of the row from this chunk on
    const WbVec<T, 8> v = left >= 8 ? wb_load<T, 8>(src) : edge_chunk(src, left > 0 ? static_cast<int>(left) : 0);
    wb_store<T, 8>(reinterpret_cast<T*>(dst + r * 128 + (c ^ (r % 8)) * 16), v);
  }
}

// An operand's BX x BK tile at (x0, k0) into shared memory, laid out as hopper.cuh's load_tile
// lays it: K-major, one box of BX rows along k; MN-major, BX / 64 boxes of BK rows along x.
template <int BX, bool K_MAJOR, typename T>
__device__ __forceinline__ void copy_tile(unsigned char* dst, const Operand<T>& op, int64_t x0, int64_t k0, int tid) {
  if constexpr (K_MAJOR) {
    copy_box<BX>(dst, op, k0, x0, tid);
  } else {
#pragma unroll
    for (int c = 0; c < BX / 64; ++c) copy_box<BK>(dst + c * kChunk, op, x0 + 64 * c, k0, tid);
  }
}

// Makes this thread's shared-memory stores visible to the async proxy, which wgmma reads through.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// TODO 2: take the operands as TMA tensor maps, `const __grid_constant__ CUtensorMap map_a` and
//         `map_b`, instead of the two Operands.
template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads) sync_load_kernel(Operand<T> op_a, Operand<T> op_b, matmul::Gemm<T> g,
                                                             int64_t tiles_m, int64_t tiles_n, bool pairs) {
#ifdef WB_HOPPER_DEVICE
  extern __shared__ unsigned char raw[];
  unsigned char* smem = raw + ((1024 - smem_u32(raw) % 1024) % 1024);  // the swizzle wants 1024-byte alignment
  unsigned char* sa = smem;            // TODO 1: kStages tiles of A, then kStages of B,
  unsigned char* sb = smem + kStageA;  //         then the stages' mbarriers (uint64_t full[kStages])
  const int tid = threadIdx.x, wg = tid / 128;
  int64_t row0, col0;
  matmul::block_tile<BM, BN, 8>(tiles_m, tiles_n, &row0, &col0);
  const int64_t k_tiles = (g.k + BK - 1) / BK;
  // TODO 3: thread 0 initialises each stage's barrier (mbar_init(&full[s], 1): one arrival, its
  //         own) and makes the barriers visible to the TMA unit (mbar_fence_init()); then
  //         __syncthreads(), so that nobody waits on a barrier before it exists.
  // TODO 4: thread 0 issues the first kStages tiles of k: for each, mbar_expect_tx(&full[s],
  //         kStageA + kStageB) (its arrival, and the bytes the TMA unit will deliver), then
  //         load_tile<BM, !TA>(A's stage s, &map_a, row0, t * BK, &full[s]) and
  //         load_tile<BN, TB>(B's stage s, &map_b, col0, t * BK, &full[s]).
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
  for (int64_t t = 0; t < k_tiles; ++t) {
    // TODO 5: instead of copying, wait for stage s = t % kStages to arrive: mbar_wait(&full[s],
    //         phase parity (t / kStages) & 1). No fence is needed: TMA writes through the async
    //         proxy, which wgmma reads.
    copy_tile<BM, !TA>(sa, op_a, row0, t * BK, tid);
    copy_tile<BN, TB>(sb, op_b, col0, t * BK, tid);
    fence_proxy_async();
    __syncthreads();  // the tiles are complete
    const uint32_t a = smem_u32(sa), b = smem_u32(sb);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16)
      Wgmma<BN, T>::template mma<TA, !TB>(d, operand_desc<!TA>(a, 64 * wg, kk), operand_desc<TB>(b, 0, kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    __syncthreads();  // every warpgroup is done reading the tiles before they are overwritten
    // TODO 6: thread 0 refills stage s with tile t + kStages, where there is one (as in TODO 4).
  }
  store_acc<BN>(g, d, row0 + 64 * wg, col0, tid % 128, pairs);
#elif defined(__CUDA_ARCH__)
  __trap();  // no sm_90a code in this build (an arch list without 9.0): fail loudly, never return garbage
#endif
}

// The operands of the case (TA, TB) as hopper.cuh's make_maps describes them: A K-major ([m][k])
// as stored, MN-major ([k][m]) transposed; B MN-major ([k][n]) as stored, K-major ([n][k]) transposed.
template <bool TA, bool TB, typename T>
void describe_operands(const matmul::Gemm<T>& g, Operand<T>* a, Operand<T>* b) {
  *a = TA ? Operand<T>{g.a, g.m, g.k, g.lda} : Operand<T>{g.a, g.k, g.m, g.lda};
  *b = TB ? Operand<T>{g.b, g.k, g.n, g.ldb} : Operand<T>{g.b, g.n, g.k, g.ldb};
}

struct Rung {
  template <typename T, bool TA, bool TB>
  static int run(const matmul::Gemm<T>& g, cudaStream_t s) {
    // TODO 2: CUtensorMap ma, mb; make_maps<BM, BN, TA, TB>(g, &ma, &mb) (return its status where
    //         it is not WB_OK), and pass ma, mb to the kernel.
    Operand<T> a, b;
    describe_operands<TA, TB>(g, &a, &b);
    const int64_t tm = matmul::tiles(g.m, BM), tn = matmul::tiles(g.n, BN);
    return launch<sync_load_kernel<T, TA, TB>>(tm * tn, kThreads, kSmem, s, a, b, g, tm, tn, pair_stores(g));
  }
};

WB_HOPPER_STATUS_STRING(exercise07_status, "exercise 07")

}  // namespace

// The launcher table: fp16 and bf16, the forward and the backward's two GEMMs with this kernel.
WB_EXPORT_VARIANT(matmul, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "exercise 07 (sm_90a): wgmma from 128-byte swizzled shared memory, tiles copied there by the "
                  "threads, one stage (starter); operands TMA cannot address go to tensor_core's kernel",
                  matmul::Variant<matmul::hopper::Route<Rung>>::launchers, exercise07_status)

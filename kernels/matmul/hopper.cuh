// What the Hopper rungs (wgmma_tma, warp_specialized, persistent) share: the sm_90a instructions
// they issue (TMA tile loads, mbarriers, wgmma, setmaxnreg), one wrapper each named as in the PTX
// ISA; the shared-memory layout those instructions agree on (128-byte swizzle) and the wgmma
// matrix descriptors that read it; the TMA tensor maps of the three GEMM cases; the output store
// from wgmma's accumulator layout; and the launcher's two refusals/routes: a device that is not
// compute capability 9.0 declines by name, and operands TMA cannot address go to tensor_core's
// kernel (included here under a namespace of its own).
//
// The operands in shared memory, BK = 64 deep (64 16-bit values = one 128-byte swizzle row):
// - K-major (A as stored, B transposed: rows of X run along k): the tile is BX rows of 128 bytes,
//   one TMA box {64 (k), BX}; wgmma reads it with SBO = 1024 (eight rows) and steps k by 16
//   values by moving the start address 32 bytes inside the swizzle atom.
// - MN-major (A transposed, B as stored: rows run along m or n): the tile is BX / 64 chunks, each
//   BK rows of 64 values along x (one TMA box {64 (x), BK} each); wgmma reads it transposed
//   (imm-trans = 1) with LBO = the chunk stride (next 64 along x) and SBO = 1024 (next 8 along k),
//   and steps k by 16 rows = 2048 bytes.
// Either way a stage's tiles come from TMA with zeros past every edge of the matrix (tails of m,
// n and k cost nothing) and the TMA unit writes the 128-byte swizzle wgmma reads without bank
// conflicts. Outputs go from the accumulators straight to global memory (two values a store where
// C's rows allow), predicated at the tile's edges, indices in int64.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums: types only (the encoder comes from the runtime, below)

#include "gemm.cuh"
#include "ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WB_HOPPER_DEVICE 1  // the sm_90a pass: the only one that has the kernels' bodies
#endif

// tensor_core's kernel, for the operands TMA cannot take (tc_route::Rung)
#ifndef WB_MATMUL_TUNING
#define WB_MATMUL_TUNING
#define WB_HOPPER_UNDEF_TUNING
#endif
namespace matmul {
namespace tc_route {
#include "tensor_core.cu"
}  // namespace tc_route
}  // namespace matmul
#ifdef WB_HOPPER_UNDEF_TUNING
#undef WB_MATMUL_TUNING
#undef WB_HOPPER_UNDEF_TUNING
#endif

namespace matmul {
namespace hopper {

constexpr int BK = 64;                 // one 128-byte swizzle row of 16-bit values
constexpr int kChunk = BK * 128;       // bytes of one MN-major chunk (64 along x, BK along k)
constexpr int kNotHopper = -90;        // the launcher's status on a device other than sm_90

// ---------------------------------------------------------------- device: PTX wrappers
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` the TMA unit will deliver to this phase.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// An arrival on the barrier at the same offset in CTA `cta` of the cluster. The default (CTA-scope)
// release: the arriving thread's own reads of the stage were wgmma's, finished by wait_group; a
// .release.cluster arrive compiles to MEMBAR.ALL.GPU before each arrival (measured: half speed).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_u32(bar)),
      "r"(cta)
      : "memory");
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// A 2-D TMA box at (x inner, y outer) of `map` into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
      : "memory");
}
// The same box into the same offset of every CTA in `mask` of the cluster, each completing on
// its own barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar)), "h"(mask)
      : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The wgmma matrix descriptor: start address, LBO, SBO (all >> 4), 128-byte swizzle (bits 62-63 = 1).
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32 | uint64_t{1} << 62;
}
// The descriptor of the 64-wide (along x) slab at x_off, 16-deep slice at kk, of an operand's stage
// tile at `tile` (shared address): layout as the header says.
template <bool K_MAJOR>
__device__ __forceinline__ uint64_t operand_desc(uint32_t tile, int x_off, int kk) {
  return K_MAJOR ? desc(tile + x_off * 128 + kk * 2, 16, 1024) : desc(tile + x_off / 64 * kChunk + kk * 128, kChunk, 1024);
}

// An operand's BX x BK tile at (x0, k0) from its tensor map into shared memory.
template <int BX, bool K_MAJOR>
__device__ __forceinline__ void load_tile(void* dst, const CUtensorMap* map, int64_t x0, int64_t k0, uint64_t* bar) {
  if constexpr (K_MAJOR) {
    tma_load(dst, map, static_cast<int>(k0), static_cast<int>(x0), bar);
  } else {
#pragma unroll
    for (int c = 0; c < BX / 64; ++c)
      tma_load(static_cast<char*>(dst) + c * kChunk, map, static_cast<int>(x0 + 64 * c), static_cast<int>(k0), bar);
  }
}
template <int BX, bool K_MAJOR>
__device__ __forceinline__ void load_tile_multicast(void* dst, const CUtensorMap* map, int64_t x0, int64_t k0,
                                                    uint64_t* bar, uint16_t mask) {
  if constexpr (K_MAJOR) {
    tma_load_multicast(dst, map, static_cast<int>(k0), static_cast<int>(x0), bar, mask);
  } else {
#pragma unroll
    for (int c = 0; c < BX / 64; ++c)
      tma_load_multicast(static_cast<char*>(dst) + c * kChunk, map, static_cast<int>(x0 + 64 * c), static_cast<int>(k0),
                         bar, mask);
  }
}

// d (+)= A (64 x 16, shared) @ B (16 x N, shared), warpgroup-wide, float accumulators; TRANS_A /
// TRANS_B = 1 read the operand MN-major. N/2 accumulators a thread: with w = warp % 4 and lane l,
// d[4i + 2h + e] is D[16w + l / 4 + 8h][8i + 2 (l % 4) + e].
template <int N, typename T>
struct Wgmma;

template <>
struct Wgmma<128, wb_bf16_t> {
  template <int TRANS_A, int TRANS_B>
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
  }
};

template <>
struct Wgmma<128, wb_half_t> {
  template <int TRANS_A, int TRANS_B>
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
  }
};

template <>
struct Wgmma<256, wb_bf16_t> {
  template <int TRANS_A, int TRANS_B>
  static __device__ __forceinline__ void mma(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
  }
};

template <>
struct Wgmma<256, wb_half_t> {
  template <int TRANS_A, int TRANS_B>
  static __device__ __forceinline__ void mma(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
  }
};

// The warpgroup's 64 x N accumulators into C at (row0, col0) (the wgmma layout above): pairs of
// values as one 4-byte store where C's rows allow (pairs), else one at a time; nothing past m, n.
// A tile wholly inside C (every tile but the last row and column of tiles) takes the unpredicated
// path: 64 x N / 128 stores a thread with no test and no branch between them.
template <int N, typename T>
__device__ __forceinline__ void store_acc(const Gemm<T>& g, const float (&d)[N / 2], int64_t row0, int64_t col0,
                                          int tid, bool pairs) {
  const int w = tid / 32 % 4, l = tid % 32;
  const int64_t r = row0 + 16 * w + l / 4, c = col0 + 2 * (l % 4);
  if (pairs && row0 + 64 <= g.m && col0 + N <= g.n) {
    T* out = g.c + r * g.n + c;
#pragma unroll
    for (int i = 0; i < N / 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        WbVec<T, 2> v;
        v.v[0] = wb_from_acc<T>(d[4 * i + 2 * h]);
        v.v[1] = wb_from_acc<T>(d[4 * i + 2 * h + 1]);
        wb_store<T, 2>(out + 8 * h * g.n + 8 * i, v);
      }
    return;
  }
#pragma unroll
  for (int i = 0; i < N / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (pairs) store_run<2, 2>(g, r + 8 * h, c + 8 * i, &d[4 * i + 2 * h]);
      else store_run<2, 1>(g, r + 8 * h, c + 8 * i, &d[4 * i + 2 * h]);
    }
}

// ---------------------------------------------------------------- host
// Whether the device is compute capability 9.0 (the sm_90a code runs there only); asked once a device.
inline bool device_is_sm90() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  static std::atomic<int> known[64];  // 0 unknown, 1 yes, 2 no
  if (device < 64 && known[device].load() != 0) return known[device].load() == 1;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  (void)cudaGetLastError();
  const bool yes = major == 9 && minor == 0;
  if (device < 64) known[device].store(yes ? 1 : 2);
  return yes;
}

// Whether TMA can address both operands: 16-byte aligned bases and row strides (leading dimensions
// multiples of 8 values), coordinates inside int32.
template <bool TA, bool TB, typename T>
inline bool tma_route(const Gemm<T>& g) {
  constexpr int64_t kMax = int64_t{1} << 31;
  return g.lda % 8 == 0 && g.ldb % 8 == 0 && wb_aligned(g.a, 16) && wb_aligned(g.b, 16) && g.m < kMax &&
         g.n < kMax && g.k < kMax && g.lda < (int64_t{1} << 36) && g.ldb < (int64_t{1} << 36);
}

// Whether C's rows take two values a store.
template <typename T>
inline bool pair_stores(const Gemm<T>& g) {
  return g.n % 2 == 0 && wb_aligned(g.c, 2 * sizeof(T));
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, through the runtime (no -lcuda); null where unavailable.
inline EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// The tensor map of an operand stored row-major as [outer][inner] with leading dimension ld,
// read in boxes of box_inner (64 values, 128 bytes, swizzled) x box_outer, zeros past its edges.
template <typename T>
inline int make_map(CUtensorMap* map, const T* base, int64_t inner, int64_t outer, int64_t ld, int box_outer) {
  const EncodeTiled encode = encoder();
  if (encode == nullptr) return static_cast<int>(cudaErrorNotSupported);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * sizeof(T)};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t step[2] = {1, 1};
  const CUtensorMapDataType type = sizeof(T) == 2 && std::is_same<T, wb_bf16_t>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(map, type, 2, const_cast<T*>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? WB_OK : static_cast<int>(cudaErrorInvalidValue);
}

// The maps of A (BM rows of op(A) a tile) and B (BN columns of op(B)) for the case (TA, TB).
template <int BM, int BN, bool TA, bool TB, typename T>
inline int make_maps(const Gemm<T>& g, CUtensorMap* ma, CUtensorMap* mb) {
  // A: K-major as stored ([m][k]), MN-major transposed ([k][m]); B: MN-major as stored ([k][n]),
  // K-major transposed ([n][k]).
  int s = TA ? make_map(ma, g.a, g.m, g.k, g.lda, BK) : make_map(ma, g.a, g.k, g.m, g.lda, BM);
  if (s != WB_OK) return s;
  return TB ? make_map(mb, g.b, g.k, g.n, g.ldb, BN) : make_map(mb, g.b, g.n, g.k, g.ldb, BK);
}

// The (row0, col0) of tile t of a tiles_m x tiles_n grid of BM x BN tiles, in groups of GROUP
// tile rows (matmul::block_tile's order, for any tile index).
template <int BM, int BN, int GROUP>
__device__ __forceinline__ void tile_at(int64_t t, int64_t tiles_m, int64_t tiles_n, int64_t* row0, int64_t* col0) {
  const int64_t per_group = GROUP * tiles_n, first = t / per_group * GROUP, in_group = t % per_group;
  const int64_t rows = tiles_m - first < GROUP ? tiles_m - first : GROUP;
  *row0 = (first + in_group % rows) * BM;
  *col0 = in_group / rows * BN;
}

// A Hopper rung's launcher: declines off sm_90; TMA-addressable operands go to Rung::run, the
// rest to tensor_core's kernel.
template <class Rung>
struct Route {
  static constexpr unsigned kDtypes = WB_F16 | WB_BF16;
  template <typename T, bool TA, bool TB>
  static int gemm(const Gemm<T>& g, cudaStream_t s) {
    if (!device_is_sm90()) return kNotHopper;
    if (!tma_route<TA, TB>(g)) return tc_route::Rung::template gemm<T, TA, TB>(g, s);
    return Rung::template run<T, TA, TB>(g, s);
  }
};

// Launches KERNEL (dynamic shared memory `smem` bytes, opting in past 48 KiB once per device) on
// `grid` blocks of `threads`, with a cluster of CLUSTER blocks along x where CLUSTER > 1.
template <auto KERNEL, int CLUSTER = 1, typename... Args>
int launch(int64_t grid, int threads, int smem, cudaStream_t stream, Args... args) {
  if (grid < 1 || grid > 0x7fffffff) return WB_ERR_ARGUMENT;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  static std::atomic<uint64_t> opted{0};
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (e == cudaSuccess && (!bit || !(opted.load() & bit))) {
    e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) opted.fetch_or(bit);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return static_cast<int>(e);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  if (CLUSTER > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  e = cudaLaunchKernelEx(&config, KERNEL, args...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return static_cast<int>(e);
  }
  return wb_launch_status();
}

// The status string of a Hopper rung: its refusal off sm_90 by name, else the CUDA one.
#define WB_HOPPER_STATUS_STRING(FN, RUNG)                                                 \
  static const char* FN(int status) {                                                    \
    if (status == matmul::hopper::kNotHopper) return RUNG " needs an sm_90a GPU (Hopper)"; \
    return wb_cuda_status_string(status);                                                \
  }

}  // namespace hopper
}  // namespace matmul

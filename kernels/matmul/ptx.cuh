// The sm_80 instructions tensor_core.cu issues, one wrapper each, named as in the PTX ISA:
// cp.async (global -> shared without registers), ldmatrix (a warp loads 8 x 8 tiles of 16-bit
// values from shared memory in the layout mma.sync wants) and mma.sync m16n8k16 (a warp's
// 16 x 8 += 16 x 16 @ 16 x 8 on the tensor cores, float accumulators). Written without
// cuda_fp16.h / cuda_bf16.h, like the rest of the tree (wb_cuda.h says why). An include guard
// rather than #pragma once: a host-side model of these instructions that defines
// WB_MATMUL_PTX_CUH first replaces them when the kernel is emulated on a CPU.
#ifndef WB_MATMUL_PTX_CUH
#define WB_MATMUL_PTX_CUH

#include <stdint.h>

#include "wb_types.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "matmul/tensor_core needs sm_80 or newer (cp.async, ldmatrix, bf16 mma.sync)"
#endif

namespace matmul {
namespace ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, asynchronously (.cg: through L2 only). Only the first
// `bytes` (16 or 0) are read; the rest of the 16 are zeros: a predicated load with no branch.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(bytes));
}
// Closes the group of this thread's cp.asyncs issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8 x 8 matrices of 16-bit values: lanes 8i .. 8i + 7 give the addresses of matrix i's rows
// (16 bytes each, 16-byte aligned). Lane l receives in r[i] the elements (l / 4, 2 (l % 4)) and
// (l / 4, 2 (l % 4) + 1) of matrix i (the low half the first), or with TRANS those of its transpose.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// d += a @ b, warp-wide: a 16 x 16 tile of A (row-major fragment, 4 registers of 2 values), a
// 16 x 8 tile of B (column-major fragment, 2 registers), float accumulators (4 per lane). With
// g = lane / 4 and t = lane % 4: a = {A[g][2t..], A[g + 8][2t..], A[g][2t + 8..], A[g + 8][2t + 8..]},
// b = {B[2t..][g], B[2t + 8..][g]}, d = {D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]}.
template <typename T>
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);

template <>
__device__ __forceinline__ void mma_16816<wb_bf16_t>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<wb_half_t>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace ptx
}  // namespace matmul

#endif  // WB_MATMUL_PTX_CUH

// Exercise 04 (the last warp by shuffles) - starter.
//
// A correct reduce_sum (y = x summed over its last dimension) for float32, float64, float16 and
// bfloat16: each block of 256 threads adds 512 values of a row into shared memory, then halves
// them in a tree, with a barrier (__syncthreads) after every step, all the way down to one value.
// The last five steps involve 32 values or fewer: one warp's worth. Finish those inside the warp,
// register to register, with __shfl_down_sync, and drop their barriers.
// exercises/04_warp_shuffle/README.md has the why and the hints; check your copy with:
//
//     python -m workbench exercise check 4 path/to/your_copy.cu
//
// passes.cuh (kernels/reduce_sum/, on the include path) is the multi-pass driver: it launches
// reduce_kernel over x, then again over the per-block partial sums, until one value per row is
// left. You only change the kernel.
#include "passes.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kPerBlock = 2 * kThreads;  // each thread adds two values on its way in

// Block b reduces values [first, first + 512) of one row into out[b]. In and Out are the element
// type or the accumulation type A (float for float32/float16/bfloat16, double for float64): the
// later passes read and write A.
template <typename In, typename Out>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t n,
                                                          int64_t blocks_per_row) {
  using A = wb_acc_t<In>;
  __shared__ A s[kThreads];
  const reduce_sum::BlockSlot slot(n, blocks_per_row, kPerBlock);
  const unsigned tid = threadIdx.x;
  const In* row = x + slot.row * n;
  s[tid] = reduce_sum::load_or_zero(row, slot.first + tid, n) + reduce_sum::load_or_zero(row, slot.first + tid + kThreads, n);
  __syncthreads();
  // TODO 1: stop this tree at 64 values (while stride > 32): the steps below 64 are the ones the
  //         first warp can do alone. Keep the #pragma unroll: the checker counts the barriers
  //         (BAR.SYNC) in the machine code, and an unrolled loop has one per step.
#pragma unroll
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  // TODO 2: in the first warp only (tid < 32): take v = s[tid] + s[tid + 32] into a register,
  //         then five steps v += __shfl_down_sync(0xffffffffu, v, offset) for offset = 16, 8, 4,
  //         2, 1; lane 0 then holds the block's sum. No __syncthreads() inside the warp.
  if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(s[0]);
}

// What the driver needs to know of the kernel: its block size, how many values a block covers,
// and how to launch it (one block per 512 values of each row, on a 1-D grid).
struct Kernel {
  static constexpr int kThreads = ::kThreads, kPerBlock = ::kPerBlock;
  template <typename In, typename Out>
  static void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t blocks_per_row, cudaStream_t s) {
    reduce_kernel<In, Out><<<static_cast<unsigned>(rows * blocks_per_row), kThreads, 0, s>>>(x, out, n, blocks_per_row);
  }
};

}  // namespace

// The launcher table: every dtype, the multi-pass forward with this kernel, the given backward.
WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "exercise 04: reduce_sum, shared-memory tree (starter: down to one value, 9 barriers)",
                  reduce_sum::PassVariant<Kernel>::launchers, wb_cuda_status_string)

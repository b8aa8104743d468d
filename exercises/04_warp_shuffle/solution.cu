// Exercise 04 (the last warp by shuffles) - a solution.
//
// reduce_sum (y = x summed over its last dimension) for float32, float64, float16 and bfloat16.
// Each block of 256 threads adds 512 values of a row into shared memory and halves them in a tree
// down to 64 values, with a barrier after each step; then the first warp adds the two halves into
// a register and finishes the last 32 values with five __shfl_down_sync steps, register to
// register, with no shared memory and no barrier. Three barriers per block instead of nine, and
// the seven idle warps no longer wait at the barriers of the steps they take no part in.
//
// The additions happen in the same order as in the starter's tree (lane i adds lane i + offset,
// as thread i added s[i + stride]), so the results are the same bits as the starter's.
#include "passes.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kPerBlock = 2 * kThreads;

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
  // The shared-memory tree, 256 -> 64 values: two steps, each ending at a barrier because the next
  // step reads what other warps wrote.
#pragma unroll
  for (unsigned stride = kThreads / 2; stride > 32; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  // The last warp: after the barrier above, s[0..63] is final and only warp 0 reads it. Its 32
  // lanes run __shfl_down_sync together (the full mask names all of them), so each step reads the
  // register of lane + offset as it was before the step: no barrier, no shared-memory round trip.
  if (tid < 32) {
    A v = s[tid] + s[tid + 32];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(v);
  }
}

struct Kernel {
  static constexpr int kThreads = ::kThreads, kPerBlock = ::kPerBlock;
  template <typename In, typename Out>
  static void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t blocks_per_row, cudaStream_t s) {
    reduce_kernel<In, Out><<<static_cast<unsigned>(rows * blocks_per_row), kThreads, 0, s>>>(x, out, n, blocks_per_row);
  }
};

}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "exercise 04 solution: reduce_sum, shared-memory tree to 64 values, the last warp by "
                  "__shfl_down_sync (3 barriers instead of 9)",
                  reduce_sum::PassVariant<Kernel>::launchers, wb_cuda_status_string)

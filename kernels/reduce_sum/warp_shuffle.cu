// warp_shuffle: rung 5 (Harris's reduce4, with shuffles where the textbook used a volatile
// shared-memory warp). What changes over first_add: the tree stops in shared memory at 64 values;
// the first warp adds the two halves and finishes the last 32 with five __shfl_down_sync steps,
// register to register. Five of the eight barriers (BAR.SYNC) and their shared-memory round trips
// are gone, and the idle warps of the last steps no longer wait at a barrier.
// Predicted: ~1.4-1.8x rung 4 (the textbook's figure for unrolling the last warp: 1.8x).
// Measured (results/gpu/5d706d0, H100, float32): 0.513 ms at 2^28, 1.27x first_add (1.27x at 16384 x 16384,
// 1.30x in bfloat16): 70% of the copy bandwidth, still bound by the tree, not by DRAM.
#include "block_sum.cuh"
#include "passes.cuh"

namespace {

constexpr int kThreads = 256;

template <typename In, typename Out>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t n,
                                                          int64_t blocks_per_row) {
  using A = wb_acc_t<In>;
  __shared__ A s[kThreads];
  const reduce_sum::BlockSlot slot(n, blocks_per_row, 2 * kThreads);
  const unsigned tid = threadIdx.x;
  const In* row = x + slot.row * n;
  s[tid] = reduce_sum::load_or_zero(row, slot.first + tid, n) + reduce_sum::load_or_zero(row, slot.first + tid + kThreads, n);
  __syncthreads();
  for (unsigned stride = kThreads / 2; stride > 32; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid < 32) {
    const A v = reduce_sum::warp_sum(s[tid] + s[tid + 32]);
    if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(v);
  }
}

struct Rung {
  static constexpr int kThreads = ::kThreads, kPerBlock = 2 * kThreads;
  template <typename In, typename Out>
  static void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t blocks_per_row, cudaStream_t s) {
    reduce_kernel<In, Out><<<static_cast<unsigned>(rows * blocks_per_row), kThreads, 0, s>>>(x, out, n, blocks_per_row);
  }
};

}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "rung 5: first add, shared-memory tree down to 64 values, the last warp by __shfl_down_sync "
                  "(3 barriers instead of 9), 512 values per block, multi-pass; any n and alignment",
                  reduce_sum::PassVariant<Rung>::launchers, wb_cuda_status_string)

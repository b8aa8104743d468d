// Planted cheat (tests only), class 4 of issue 38: a rolled loop under a counting rule. Exercise 04
// asks for fewer barriers than the starter's tree; this is the starter's tree, all nine barriers,
// in a loop the compiler must not unroll, so the machine code holds one BAR.SYNC where the starter's
// holds nine, and one __shfl_down_sync that changes nothing, so the "must contain SHFL" rule finds
// one. Every block still waits at nine barriers. Expected verdict now: counting rules count executed
// instructions; SASS rules FAIL (no fewer barriers than the starter).
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
#pragma unroll 1
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  A v = s[0];
  v = __shfl_down_sync(0xffffffffu, v, 0);  // the shuffle the rule looks for: a no-op
  if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(v);
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
                  "planted: the starter's nine barriers in a rolled loop, and a shuffle that does nothing",
                  reduce_sum::PassVariant<Kernel>::launchers, wb_cuda_status_string)

// first_add: rung 4 (Harris's reduce3). What changes over sequential: each thread loads two values,
// 256 apart, and adds them on the way into shared memory, so a block covers 512 values with the
// same 8-step tree: half the blocks, and no thread idles through the first step.
// Predicted: ~1.8x rung 3 (the tree is the cost, and there are half as many trees per byte).
// Measured (results/gpu/5d706d0, H100, float32): 0.654 ms at 2^28, 1.90x sequential (1.88x at 16384 x 16384;
// 1.59x at 65536 x 1024): 55% of the copy bandwidth.
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
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(s[0]);
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
                  "rung 4: first add during the global load (two values per thread, 512 per block), then the "
                  "sequential tree, multi-pass; any n and alignment",
                  reduce_sum::PassVariant<Rung>::launchers, wb_cuda_status_string)

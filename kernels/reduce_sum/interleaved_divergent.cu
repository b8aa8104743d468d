// interleaved_divergent: the ladder's first rung, the textbook's starting point (Harris's
// reduce0). A block of 256 threads loads 256 values into shared memory; at step s every thread
// whose index is a multiple of 2s adds the value s away. The active threads are scattered across
// every warp, so each step runs all 8 warps with most lanes masked off (divergence), and the
// `tid % (2s)` test costs an integer modulo per thread per step. Rows longer than 256 take more
// passes of the same kernel over the partial sums (passes.cuh).
// Predicted: 10-20% of the memory bandwidth: bound by the shared-memory tree (8 barriers and
// 255 dependent adds per 1 KiB of floats), not by DRAM.
// Measured (results/gpu/5d706d0, H100, float32): 1.273 ms on one 2^28 row, 1.282 ms at 16384 x 16384: 28%
// of the copy bandwidth, 0.28x torch.sum (1.00x: the first rung). bfloat16: 14% (the tree's cost
// per value is the same, the bytes half).
#include "passes.cuh"

namespace {

constexpr int kThreads = 256;

template <typename In, typename Out>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t n,
                                                          int64_t blocks_per_row) {
  using A = wb_acc_t<In>;
  __shared__ A s[kThreads];
  const reduce_sum::BlockSlot slot(n, blocks_per_row, kThreads);
  const unsigned tid = threadIdx.x;
  s[tid] = reduce_sum::load_or_zero(x + slot.row * n, slot.first + tid, n);
  __syncthreads();
  for (unsigned stride = 1; stride < kThreads; stride *= 2) {
    if (tid % (2 * stride) == 0) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(s[0]);
}

struct Rung {
  static constexpr int kThreads = ::kThreads, kPerBlock = ::kThreads;
  template <typename In, typename Out>
  static void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t blocks_per_row, cudaStream_t s) {
    reduce_kernel<In, Out><<<static_cast<unsigned>(rows * blocks_per_row), kThreads, 0, s>>>(x, out, n, blocks_per_row);
  }
};

}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "rung 1: interleaved addressing with a divergent branch (tid % 2s), 256 values per block, "
                  "multi-pass; any n and alignment",
                  reduce_sum::PassVariant<Rung>::launchers, wb_cuda_status_string)

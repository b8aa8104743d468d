// sequential: rung 3 (Harris's reduce2). What changes over interleaved_conflicts: at step s, thread
// t < s adds s[t + s] into s[t] (s from 128 down to 1), so a warp's 32 threads read 32 consecutive
// words: 32 different banks, no conflicts, and the active threads stay packed in the first warps.
// Predicted: ~1.3-2x rung 2 (the textbook's G80 figure: 2.0x). Half the threads still idle from
// the first step on: they only loaded one value each.
// Measured (results/gpu/5d706d0, H100, float32): 1.242 ms at 2^28, 1.20x interleaved_conflicts (1.21x at
// 16384 x 16384), 1.02x interleaved_divergent: 29% of the copy bandwidth.
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
  const In* row = x + slot.row * n;
  s[tid] = reduce_sum::load_or_zero(row, slot.first + tid, n);
  __syncthreads();
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = wb_from_acc<Out>(s[0]);
}

struct Rung {
  static constexpr int kThreads = ::kThreads, kPerBlock = kThreads;
  template <typename In, typename Out>
  static void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t blocks_per_row, cudaStream_t s) {
    reduce_kernel<In, Out><<<static_cast<unsigned>(rows * blocks_per_row), kThreads, 0, s>>>(x, out, n, blocks_per_row);
  }
};

}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "rung 3: sequential addressing (thread t adds s[t + stride], stride halving: conflict-free), "
                  "256 values per block, multi-pass; any n and alignment",
                  reduce_sum::PassVariant<Rung>::launchers, wb_cuda_status_string)

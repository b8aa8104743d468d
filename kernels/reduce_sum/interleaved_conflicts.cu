// interleaved_conflicts: rung 2 (Harris's reduce1). What changes over interleaved_divergent: at step
// s, thread t works on index 2*s*t, so the active threads are the first 256/(2s) of the block,
// packed into as few warps as possible: whole warps drop out instead of every warp running with
// most lanes masked, and the modulo is gone. The new cost: threads of a warp now touch addresses
// 2s apart, so from s = 16 on (stride 32 words) they hit the same shared-memory bank (n-way bank
// conflicts, replayed serially).
// Predicted: ~1.5-2x rung 1 (the textbook's G80 figure is 2.3x; fewer issued warps per step).
// Measured (results/gpu/5d706d0, H100, float32): 1.497 ms at 2^28, 0.85x interleaved_divergent (the same at
// 16384 x 16384 and in bfloat16): slower, not faster. On the H100 the divergent branch is cheap
// (masked lanes cost issue slots, not replays), while the 2-, 4- ... 32-way bank conflicts replay
// every shared-memory access of the later steps. The textbook's 2.3x was a 2007 GPU's trade.
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
  for (unsigned stride = 1; stride < kThreads; stride *= 2) {
    const unsigned index = 2 * stride * tid;
    if (index < kThreads) s[index] += s[index + stride];
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
                  "rung 2: interleaved addressing, active threads packed into whole warps (no divergence, "
                  "shared-memory bank conflicts), 256 values per block, multi-pass; any n and alignment",
                  reduce_sum::PassVariant<Rung>::launchers, wb_cuda_status_string)

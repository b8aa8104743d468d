// The textbook's multi-pass driver for the first rungs of the ladder (Harris, "Optimizing Parallel
// Reduction in CUDA"): a rung's kernel reduces each row's n values to one partial per block, and
// the same kernel runs again over the partials until one value per row is left. Every pass sums in
// a fixed order, so the result is deterministic; partials are kept in the accumulation type
// (float, double for float64) in two ping-pong halves of the workspace.
//
// A rung supplies:
//   struct Rung {
//     static constexpr int kThreads;           // block size
//     static constexpr int kPerBlock;          // values one block reduces (kThreads, or 2x with a first add)
//     template <typename In, typename Out>     // In/Out: T or the accumulation type
//     static void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t blocks_per_row, cudaStream_t s);
//   };
// launch() runs rows * blocks_per_row blocks on a 1-D grid; block b reduces row b / blocks_per_row,
// values [(b % blocks_per_row) * kPerBlock, + kPerBlock), into out[b].
#pragma once

#include "variant.cuh"
#include "wb_cuda.h"

namespace reduce_sum {

// Row and block-within-row of this block, and the index of its first value in x.
struct BlockSlot {
  int64_t row, first;
  __device__ __forceinline__ BlockSlot(int64_t n, int64_t blocks_per_row, int per_block) {
    const int64_t b = blockIdx.x;
    row = b / blocks_per_row;
    first = (b % blocks_per_row) * per_block;
  }
};

template <typename In>
__device__ __forceinline__ wb_acc_t<In> load_or_zero(const In* row, int64_t i, int64_t n) {
  return i < n ? wb_to_acc(row[i]) : wb_acc_t<In>(0);
}
// wb_to_acc of an accumulation-type value is the identity: partials read back unchanged.

template <typename Rung, typename T>
size_t pass_workspace_bytes(int64_t rows, int64_t n) {
  const int64_t first = wb_ceil_div(n, Rung::kPerBlock);
  const int64_t second = first > 1 ? wb_ceil_div(first, Rung::kPerBlock) : 0;
  return static_cast<size_t>(rows * (first + second)) * sizeof(wb_acc_t<T>);
}

template <typename Rung, typename T>
int run_passes(const T* x, T* y, void* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
  using A = wb_acc_t<T>;
  int64_t blocks = wb_ceil_div(n, Rung::kPerBlock);
  if (blocks == 1) {
    Rung::template launch<T, T>(x, y, rows, n, 1, stream);
    return wb_launch_status();
  }
  A* halves[2] = {static_cast<A*>(workspace), static_cast<A*>(workspace) + rows * blocks};
  Rung::template launch<T, A>(x, halves[0], rows, n, blocks, stream);
  int status = wb_launch_status();
  int cur = 0;
  for (n = blocks; status == WB_OK; n = blocks, cur ^= 1) {
    blocks = wb_ceil_div(n, Rung::kPerBlock);
    if (blocks == 1) {
      Rung::template launch<A, T>(halves[cur], y, rows, n, 1, stream);
      return wb_launch_status();
    }
    Rung::template launch<A, A>(halves[cur], halves[cur ^ 1], rows, n, blocks, stream);
    status = wb_launch_status();
  }
  return status;
}

// A textbook rung's forward as a variant: the multi-pass driver above, every dtype, the scalar
// broadcast backward (the ladder is about the forward; float64 keeps a true gradcheck possible).
template <typename Rung>
struct Passes {
  static constexpr bool kVectorBackward = false;
  template <typename T>
  static int forward(const T* x, T* y, void* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
    return run_passes<Rung, T>(x, y, workspace, rows, n, stream);
  }
  template <typename T>
  static size_t workspace_bytes(int64_t rows, int64_t n) { return pass_workspace_bytes<Rung, T>(rows, n); }
};

template <typename Rung>
using PassVariant = Variant<Passes<Rung>>;

}  // namespace reduce_sum

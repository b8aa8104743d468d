// Sums and maxes across a warp and across a block by shuffles, in a fixed order: the same inputs
// always give the same bits. reduce_sum's ladder (from warp_shuffle on), rmsnorm's row sums and the
// row family (wb_row.cuh) use them. A may be float, double or any struct with + and a wb_shfl_down /
// wb_shfl_xor overload (WbSum2, wb_math.h).
#pragma once

#include "wb_cuda.h"
#include "wb_math.h"

// Shuffles for the accumulator types.
__device__ __forceinline__ float wb_shfl_down(float v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ double wb_shfl_down(double v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ float wb_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ double wb_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }

// A pair of sums moves as two shuffles.
template <typename A>
__device__ __forceinline__ WbSum2<A> wb_shfl_down(WbSum2<A> v, int d) { return {wb_shfl_down(v.a, d), wb_shfl_down(v.b, d)}; }
template <typename A>
__device__ __forceinline__ WbSum2<A> wb_shfl_xor(WbSum2<A> v, int m) { return {wb_shfl_xor(v.a, m), wb_shfl_xor(v.b, m)}; }

namespace wb_reduce {

// The sum of v over the warp's 32 lanes, valid in lane 0: five shuffle-and-add steps, no shared
// memory and no barrier (a warp's lanes run in lockstep for __shfl_down_sync).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = v + wb_shfl_down(v, offset);
  return v;
}

// The sum of v over a block of BLOCK threads, valid in thread 0: each warp sums by shuffles, warp
// 0 sums the warps' results. Two barriers; safe to call again in a loop (the first one orders the
// previous call's reads of `partials` before this call's writes).
template <int BLOCK, typename A>
__device__ __forceinline__ A block_sum(A v) {
  static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "a block of whole warps");
  __shared__ A partials[BLOCK / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < BLOCK / 32 ? partials[lane] : A{});
  return v;
}

// The combining steps of the all-reductions below.
struct Plus {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct Max {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const { return wb_max(a, b); }
};

// op over the warp's 32 values, in every lane: a butterfly (__shfl_xor_sync). Every lane combines
// the same values in the same tree, so all 32 hold the same bits.
template <typename A, typename Op>
__device__ __forceinline__ A warp_allreduce(A v, Op op) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v = op(v, wb_shfl_xor(v, mask));
  return v;
}

// op over the block (blockDim.x a multiple of 32, up to 1024), in every thread: each warp by a
// butterfly, then every thread combines the warps' results in warp order (the same bits everywhere).
// `partials` holds blockDim.x / 32 values of A in shared memory. Two barriers; safe in a loop (the
// first orders the previous call's reads before this call's writes).
template <typename A, typename Op>
__device__ __forceinline__ A block_allreduce(A v, A* partials, Op op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_allreduce(v, op);
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  A total = partials[0];
  for (int w = 1; w < warps; ++w) total = op(total, partials[w]);
  return total;
}

template <typename A>
__device__ __forceinline__ A warp_allsum(A v) { return warp_allreduce(v, Plus{}); }
template <typename A>
__device__ __forceinline__ A block_allsum(A v, A* partials) { return block_allreduce(v, partials, Plus{}); }
template <typename A>
__device__ __forceinline__ A warp_allmax(A v) { return warp_allreduce(v, Max{}); }
template <typename A>
__device__ __forceinline__ A block_allmax(A v, A* partials) { return block_allreduce(v, partials, Max{}); }

}  // namespace wb_reduce

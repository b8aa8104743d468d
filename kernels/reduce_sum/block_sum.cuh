// Sums across a warp and across a block by shuffles (__shfl_down_sync), in a fixed order: the
// same inputs always give the same bits. Used by the ladder's rungs from warp_shuffle on.
#pragma once

#include "wb_cuda.h"

namespace reduce_sum {

// The sum of v over the warp's 32 lanes, valid in lane 0: five shuffle-and-add steps, no shared
// memory and no barrier (a warp's lanes run in lockstep for __shfl_down_sync).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
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
  if (warp == 0) v = warp_sum(lane < BLOCK / 32 ? partials[lane] : A(0));
  return v;
}

}  // namespace reduce_sum

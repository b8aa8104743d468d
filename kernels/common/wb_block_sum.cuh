// Sums across a warp and across a block by shuffles, in a fixed order: the same inputs always give
// the same bits. reduce_sum's ladder (from warp_shuffle on) and rmsnorm's row sums use them.
// A may be float, double or any struct with + and a wb_shfl_down / wb_shfl_xor overload (WbSum2).
#pragma once

#include "wb_cuda.h"

// Shuffles for the accumulator types; a pair of sums moves as two shuffles.
__device__ __forceinline__ float wb_shfl_down(float v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ double wb_shfl_down(double v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ float wb_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ double wb_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }

// Two sums reduced together (one barrier pair for both): rmsnorm's backward needs sum(x^2) and
// sum(dy * w * x) of the same row.
template <typename A>
struct WbSum2 {
  A a, b;
  __device__ __forceinline__ WbSum2 operator+(const WbSum2& o) const { return {a + o.a, b + o.b}; }
};
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

// The sum of v over the warp, in every lane: a butterfly (__shfl_xor_sync). Every lane adds the
// same values in the same tree, so all 32 hold the same bits.
template <typename A>
__device__ __forceinline__ A warp_allsum(A v) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v = v + wb_shfl_xor(v, mask);
  return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, up to 1024), in every thread: each warp
// sums by a butterfly, then every thread adds the warps' sums in warp order (the same bits
// everywhere). `partials` holds blockDim.x / 32 values of A in shared memory. Two barriers; safe
// in a loop (the first orders the previous call's reads before this call's writes).
template <typename A>
__device__ __forceinline__ A block_allsum(A v, A* partials) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_allsum(v);
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  A total = partials[0];
  for (int w = 1; w < warps; ++w) total = total + partials[w];
  return total;
}

}  // namespace wb_reduce

// The elementwise family's CUDA kernels and launchers (the contract: wb_elementwise.h). An op's
// variant file is its launcher table and its WB_EXPORT_VARIANT:
//
//   const WbElementwiseLaunchers launchers = wb_elementwise::vector_launchers<WB_F32, MyOpForward, MyOpBackward>();
//
// One kernel serves every step: a flat one-shot grid over the tensors seen as n elements. Each
// thread takes one vector of V elements of every stream it reads (16 bytes: LDG.E.128 where
// sizeof(T) * V == 16), computes in float (double for double) and rounds once on the store, so a
// warp's accesses are 32 adjacent 16-byte vectors (512 coalesced bytes) and all of a thread's loads
// are in flight before its first arithmetic. The grid is one-shot (a block per 256 vectors, no loop):
// many short blocks keep every SM's loads in flight. This is elementwise_mul's former flat_tiles.cuh
// and vector_add's vec4.cu, the same accesses in the same order: the probe (scripts/probe_bandwidth.cu,
// H100) found 1, 2, 4 or 8 vectors per thread within 0.3% of one another (102% of the copy bandwidth
// at 1), a grid-stride loop 5% slower and streaming loads (__ldcs) 3% slower. Inputs are loaded
// through the read-only path (wb_load_readonly), as those kernels' __restrict__ pointers were: their
// PTX and this one's (nvcc -ptx, sm_90) have the same loads and stores, ld.global.nc.v4 / st.global.v4
// and the scalar tail's, in the same order. (elementwise_mul's scalar.cu stored da before loading a;
// here every load of a thread comes first.)
//
// Route (vector_launchers): every pointer 16-byte aligned -> the first n - n % V elements as vectors,
// the last n % V through the same kernel with V = 1 in a launch of their own; any pointer not
// aligned (a view with a storage offset) -> the whole call with V = 1. scalar_launchers: V = 1
// always, one element per thread with plain loads (the teaching baseline).
#pragma once

#include <stdint.h>

#include "wb_elementwise.h"
#include "wb_vec.cuh"

namespace wb_elementwise {

constexpr int kThreads = 256;

// The streams of one step, as typed pointers (passed to the kernel by value).
template <typename T, int READS, int WRITES>
struct Streams {
  const T* in[READS];
  T* out[WRITES];

  Streams advanced(int64_t by) const {
    Streams s = *this;
    for (int k = 0; k < READS; ++k) s.in[k] += by;
    for (int k = 0; k < WRITES; ++k) s.out[k] += by;
    return s;
  }
};

// out[k][i] = f(in[..][i])[k] over nvec vectors of V elements.
template <typename T, int V, typename S>
__global__ void __launch_bounds__(kThreads) flat_kernel(Streams<T, S::kReads, S::kWrites> s, int64_t nvec, S f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= nvec) return;
  WbVec<T, V> in[S::kReads], out[S::kWrites];
#pragma unroll
  for (int k = 0; k < S::kReads; ++k) in[k] = wb_load_readonly<T, V>(s.in[k] + i * V);  // inputs are never written
#pragma unroll
  for (int j = 0; j < V; ++j) {
    wb_acc_t<T> x[S::kReads], y[S::kWrites];
#pragma unroll
    for (int k = 0; k < S::kReads; ++k) x[k] = wb_to_acc(in[k].v[j]);
    f(x, y);
#pragma unroll
    for (int k = 0; k < S::kWrites; ++k) out[k].v[j] = wb_from_acc<T>(y[k]);
  }
#pragma unroll
  for (int k = 0; k < S::kWrites; ++k) wb_store<T, V>(s.out[k] + i * V, out[k]);
}

inline unsigned blocks_for(int64_t nvec) { return static_cast<unsigned>(wb_ceil_div(nvec, kThreads)); }

// One step for storage type T: V-wide vectors where every pointer allows them, then the tail.
template <typename T, int V, typename S>
int launch(const WbElementwiseArgs* p, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  Streams<T, S::kReads, S::kWrites> s;
  bool aligned = true;
  for (int k = 0; k < S::kReads; ++k) {
    s.in[k] = static_cast<const T*>(p->in[k]);
    aligned = aligned && wb_aligned(s.in[k], sizeof(T) * V);
  }
  for (int k = 0; k < S::kWrites; ++k) {
    s.out[k] = static_cast<T*>(p->out[k]);
    aligned = aligned && wb_aligned(s.out[k], sizeof(T) * V);
  }
  const S f = make_step<S>(*p);
  int64_t done = 0;
  if constexpr (V > 1) {
    const int64_t nvec = aligned ? p->n / V : 0;
    if (nvec) flat_kernel<T, V, S><<<blocks_for(nvec), kThreads, 0, stream>>>(s, nvec, f);
    done = nvec * V;
  }
  if (p->n > done) flat_kernel<T, 1, S><<<blocks_for(p->n - done), kThreads, 0, stream>>>(s.advanced(done), p->n - done, f);
  return wb_launch_status();
}

// A launcher for the dtypes in DTYPES: 16 bytes per access (V = 16 / sizeof(T)), or V = 1.
template <unsigned DTYPES, bool VECTOR, typename S>
int step(const WbElementwiseArgs* p, const WbLaunch* l) {
  return wb_dispatch_dtype<DTYPES>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch<T, VECTOR ? 16 / static_cast<int>(sizeof(T)) : 1, S>(p, l);
  });
}

// Launcher tables: 16-byte vectors with the route above, or one element per thread.
template <unsigned DTYPES, typename Forward, typename Backward>
constexpr WbElementwiseLaunchers vector_launchers() {
  return {step<DTYPES, true, Forward>, step<DTYPES, true, Backward>};
}
template <unsigned DTYPES, typename Forward, typename Backward>
constexpr WbElementwiseLaunchers scalar_launchers() {
  return {step<DTYPES, false, Forward>, step<DTYPES, false, Backward>};
}

}  // namespace wb_elementwise

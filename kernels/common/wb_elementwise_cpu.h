// The elementwise family's C++ CPU launchers (the contract: wb_elementwise.h): chunks of elements
// on the front end's thread pool (torch's, or the NumPy module's), 16-bit values converted to float
// exactly as PyTorch does and rounded once. Any alignment and size. The loop over a chunk is
// branch-free and vectorized (WB_CPU_SIMD, wb_cpu.h). An op's cpu.cpp is
//
//   const WbElementwiseLaunchers launchers = wb_elementwise::cpu_launchers<WB_F32 | WB_F64, MyOpForward, MyOpBackward>();
#pragma once

#include "wb_cpu.h"
#include "wb_elementwise.h"

namespace wb_elementwise {

// Elements [i0, i1) of one step: a branch-free loop (the 16-bit conversions too) that the compiler
// vectorizes. The streams' pointers are copied into locals first: read through `p` they could alias
// the outputs, and the compiler would reload them every element.
template <typename T, typename S>
WB_CPU_SIMD void cpu_range(const WbElementwiseArgs* p, const S* step, int64_t i0, int64_t i1) {
  const T* in[S::kReads];
  T* out[S::kWrites];
  for (int k = 0; k < S::kReads; ++k) in[k] = static_cast<const T*>(p->in[k]);
  for (int k = 0; k < S::kWrites; ++k) out[k] = static_cast<T*>(p->out[k]);
  const S f = *step;
  for (int64_t i = i0; i < i1; ++i) {
    wb_acc_t<T> x[S::kReads], y[S::kWrites];
    for (int k = 0; k < S::kReads; ++k) x[k] = wb_to_acc(in[k][i]);
    f(x, y);
    for (int k = 0; k < S::kWrites; ++k) out[k][i] = wb_from_acc<T>(y[k]);
  }
}

// One step as a launcher, for the dtypes in DTYPES.
template <unsigned DTYPES, typename S>
int cpu_step(const WbElementwiseArgs* p, const WbLaunch* l) {
  return wb_dispatch_dtype<DTYPES>(p->dtype, [&](auto tag) {
    const S f = make_step<S>(*p);
    wb_parallel_for(l, 0, p->n, kWbCpuGrain, [&](int64_t i0, int64_t i1) {
      cpu_range<typename decltype(tag)::type, S>(p, &f, i0, i1);
    });
    return static_cast<int>(WB_OK);
  });
}

template <unsigned DTYPES, typename Forward, typename Backward>
constexpr WbElementwiseLaunchers cpu_launchers() {
  return {cpu_step<DTYPES, Forward>, cpu_step<DTYPES, Backward>};
}

}  // namespace wb_elementwise

// cpu: the C++ CPU implementation, parallel over chunks of elements on torch's thread pool (lent
// by the harness). It is the reference path on machines without a GPU and in CI, so it supports
// every dtype the GPU variants do, converting 16-bit values to float exactly as PyTorch does.
// Written by hand against the family's argument struct (kernels/common/wb_elementwise.h) rather
// than through wb_elementwise::cpu_launchers, which does the same: a variant may always be raw.
// The loops are branch-free (the 16-bit conversions too), so the compiler vectorizes them;
// WB_CPU_SIMD builds them for AVX-512, AVX2 and SSE2, picked at load.
#include "elementwise_mul.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;

template <typename T>
WB_CPU_SIMD void forward_range(const T* a, const T* b, T* y, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) y[i] = wb_from_acc<T>(wb_to_acc(a[i]) * wb_to_acc(b[i]));
}

int forward(const WbElementwiseMulForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(p->in[0]);
    const T* b = static_cast<const T*>(p->in[1]);
    T* y = static_cast<T*>(p->out[0]);
    wb_parallel_for(l, 0, p->n, kWbCpuGrain, [&](int64_t i0, int64_t i1) { forward_range(a, b, y, i0, i1); });
    return WB_OK;
  });
}

template <typename T>
WB_CPU_SIMD void backward_range(const T* dy, const T* a, const T* b, T* da, T* db, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const auto g = wb_to_acc(dy[i]);
    da[i] = wb_from_acc<T>(g * wb_to_acc(b[i]));
    db[i] = wb_from_acc<T>(g * wb_to_acc(a[i]));
  }
}

int backward(const WbElementwiseMulBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = static_cast<const T*>(p->in[0]);
    const T* a = static_cast<const T*>(p->in[1]);
    const T* b = static_cast<const T*>(p->in[2]);
    T* da = static_cast<T*>(p->out[0]);
    T* db = static_cast<T*>(p->out[1]);
    wb_parallel_for(l, 0, p->n, kWbCpuGrain, [&](int64_t i0, int64_t i1) { backward_range(dy, a, b, da, db, i0, i1); });
    return WB_OK;
  });
}

const WbElementwiseLaunchers launchers = {forward, backward};

}  // namespace

WB_EXPORT_VARIANT(elementwise_mul, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool, parallel over chunks of elements; any alignment and size",
                  launchers, wb_cpu_status_string)

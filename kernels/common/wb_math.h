// Scalar math shared by every variant, host and device: exp and reciprocal that take the
// hardware's fast path on the device, so that CPU and GPU variants compute the same functions.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define WB_HD __host__ __device__ __forceinline__
#else
#define WB_HD inline
#endif

// exp and reciprocal: the hardware's fast approximations for float on the device (a few ulp,
// far below fp32 check tolerances), exact library calls everywhere else.
WB_HD float wb_exp(float v) {
#if defined(__CUDA_ARCH__)
  return __expf(v);
#else
  return expf(v);
#endif
}
WB_HD double wb_exp(double v) { return exp(v); }

WB_HD float wb_rcp(float v) {
#if defined(__CUDA_ARCH__)
  return __fdividef(1.0f, v);  // 0 for v = inf, which the limits below rely on
#else
  return 1.0f / v;
#endif
}
WB_HD double wb_rcp(double v) { return 1.0 / v; }

// -infinity, the identity of wb_max; by its bits on the device, where NVRTC has no INFINITY.
WB_HD float wb_neg_inf(float) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(0xff800000u);
#else
  return -INFINITY;
#endif
}
WB_HD double wb_neg_inf(double) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
#else
  return -static_cast<double>(INFINITY);
#endif
}

// max that keeps a NaN (as torch.amax does; fmax drops it): a row with a NaN has a NaN maximum.
template <typename A>
WB_HD A wb_max(A a, A b) { return a > b || a != a ? a : b; }

// Two sums reduced together (one barrier pair for both): rmsnorm's backward sums x^2 and
// dy * w * x of the same row; a row op's step may return one from row.sum (wb_row.h).
template <typename A>
struct WbSum2 {
  A a, b;
  WB_HD WbSum2 operator+(const WbSum2& o) const { return {a + o.a, b + o.b}; }
};

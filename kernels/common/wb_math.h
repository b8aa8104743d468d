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

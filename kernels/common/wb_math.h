// Scalar math shared by every variant, host and device: exp and reciprocal that take the
// hardware's fast path on the device and a branch-free one on the host (a loop of them vectorizes),
// so that CPU and GPU variants compute the same functions.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define WB_HD __host__ __device__ __forceinline__
#else
#define WB_HD inline
#endif

#if !defined(__CUDA_ARCH__)
// exp on the host without a library call, so that a loop of them vectorizes: x = n ln2 + r with
// |r| <= ln2/2, exp(x) = 2^n p(r) (Cephes' expf polynomial and exp Pade form: within 2 ulp). Adding
// 1.5 * 2^k rounds x / ln2 to the integer n, left in the low mantissa bits; 2^n is applied as two
// factors so that results down to the subnormals and up to overflow come out right. Clamping x to
// where exp is already 0 or inf keeps both limits exact; NaN passes through.
inline float wb_host_exp(float x) {
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  const float shift = 12582912.0f;  // 1.5 * 2^23
  const float z = x * 1.44269504088896341f + shift;
  const float n = z - shift;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 in two parts: n * hi is exact
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t zb, sb;
  memcpy(&zb, &z, sizeof zb);
  memcpy(&sb, &shift, sizeof sb);
  const int32_t ni = static_cast<int32_t>(zb - sb), n1 = ni >> 1;  // n in [-150, 128]
  const uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23, b2 = static_cast<uint32_t>(ni - n1 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}

inline double wb_host_exp(double x) {
  x = x < -746.0 ? -746.0 : x;
  x = x > 710.0 ? 710.0 : x;
  const double shift = 6755399441055744.0;  // 1.5 * 2^52
  const double z = x * 1.4426950408889634074 + shift;
  const double n = z - shift;
  const double r = (x - n * 6.93145751953125e-1) - n * 1.42860682030941723212e-6;
  const double rr = r * r;
  const double px = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 9.99999999999999999910e-1);
  const double qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr + 2.27265548208155028766e-1) * rr
                    + 2.00000000000000000009e0;
  const double p = 1.0 + 2.0 * (px / (qx - px));
  uint64_t zb, sb;
  memcpy(&zb, &z, sizeof zb);
  memcpy(&sb, &shift, sizeof sb);
  const int64_t ni = static_cast<int64_t>(zb - sb), n1 = ni >> 1;  // n in [-1077, 1025]
  const uint64_t b1 = static_cast<uint64_t>(n1 + 1023) << 52, b2 = static_cast<uint64_t>(ni - n1 + 1023) << 52;
  double s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}
#endif

// exp: the hardware's fast approximation for float on the device (a few ulp, far below fp32 check
// tolerances), the branch-free one above on the host.
WB_HD float wb_exp(float v) {
#if defined(__CUDA_ARCH__)
  return __expf(v);
#else
  return wb_host_exp(v);
#endif
}
WB_HD double wb_exp(double v) {
#if defined(__CUDA_ARCH__)
  return exp(v);
#else
  return wb_host_exp(v);
#endif
}

// reciprocal: the hardware's fast division for float on the device, exact division elsewhere.

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

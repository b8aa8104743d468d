// Host-side helpers shared by the C++ CPU variants: 16-bit storage types with round-to-nearest-even
// conversion (bit-exact with PyTorch's), the status string and the thread pool; dtype dispatch in
// wb_dispatch.h. No torch, no CUDA.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "wb_dispatch.h"

inline float wb_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
inline uint32_t wb_float_to_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }

inline float wb_to_acc(float v) { return v; }
inline double wb_to_acc(double v) { return v; }

inline float wb_to_acc(wb_half_t h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = ldexpf(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return wb_bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf, nan
  return wb_bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline float wb_to_acc(wb_bf16_t b) { return wb_bits_to_float(static_cast<uint32_t>(b.bits) << 16); }

template <typename T> inline T wb_from_acc(wb_acc_t<T> v);
template <> inline float wb_from_acc<float>(float v) { return v; }
template <> inline double wb_from_acc<double>(double v) { return v; }

template <> inline wb_half_t wb_from_acc<wb_half_t>(float f) {
  const uint32_t x = wb_float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return {static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (ax >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24, rounded to even
    const float scaled = wb_bits_to_float(ax) * 16777216.0f;  // exact
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(nearbyintf(scaled)))};
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even, then rebias the exponent 127 -> 15.
  const uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u) - 0x38000000u;
  return {static_cast<uint16_t>(sign | (rounded >> 13))};
}

template <> inline wb_bf16_t wb_from_acc<wb_bf16_t>(float f) {
  const uint32_t x = wb_float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((x >> 16) | 0x0040u)};  // quiet nan
  return {static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

inline const char* wb_cpu_status_string(int status) {
  const char* words = wb_status_words(status);
  return words ? words : "unknown error";
}

// Runs body(begin, end) over [begin, end) on the harness's thread pool, in chunks of at least grain.
template <typename Body>
inline void wb_parallel_for(const WbLaunch* launch, int64_t begin, int64_t end, int64_t grain, Body&& body) {
  auto trampoline = [](void* ctx, int64_t b, int64_t e) { (*static_cast<Body*>(ctx))(b, e); };
  launch->host->parallel_for(begin, end, grain, trampoline, &body);
}

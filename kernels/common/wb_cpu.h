// Host-side helpers shared by the C++ CPU variants: 16-bit storage types with round-to-nearest-even
// conversion (bit-exact with PyTorch's), the status string, the thread pool and the SIMD clones;
// dtype dispatch in wb_dispatch.h. No torch, no CUDA.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "wb_dispatch.h"

// WB_CPU_SIMD marks a CPU variant's hot loop: written branch-free so that the compiler vectorizes
// it, and compiled three times, for AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3) and the x86-64
// baseline (SSE2), everything it calls inlined into each (flatten); the loader picks the widest this
// CPU runs, once (an ifunc). One build runs on any x86-64 (a wheel, a shared cache), and the cache
// key needs nothing about the machine, as it would with -march=native. A clone with FMA rounds
// a * b + c once, so results may differ in the last bit between CPUs of different ISA levels; on
// one machine they are deterministic. With another compiler or architecture (or -DWB_CPU_CLONES=0)
// the loop is compiled once, for the build's own target. The loops vectorize where the build has
// -fno-trapping-math (workbench/build/tree.py): both sides of a float select are then evaluated.
#if !defined(WB_CPU_CLONES)
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define WB_CPU_CLONES 1
#else
#define WB_CPU_CLONES 0
#endif
#endif
#if WB_CPU_CLONES
#define WB_CPU_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define WB_CPU_SIMD
#endif

inline float wb_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
inline uint32_t wb_float_to_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }

inline float wb_to_acc(float v) { return v; }
inline double wb_to_acc(double v) { return v; }

// half -> float, exact, without branches (a loop of them vectorizes): the half's exponent and
// mantissa shifted into place and rebiased; inf/NaN take the top exponent; zero and subnormals are
// rebuilt as a normal float minus 2^-14, which is exact.
inline float wb_to_acc(wb_half_t h) {
  const uint32_t em = static_cast<uint32_t>(h.bits & 0x7fffu) << 13, exponent = em & 0x0f800000u;
  uint32_t u = em + 0x38000000u;                                 // rebias 15 -> 127
  u = exponent == 0x0f800000u ? u + 0x38000000u : u;             // inf, nan: exponent 255
  const float sub = wb_bits_to_float(u + 0x00800000u) - wb_bits_to_float(0x38800000u);
  const float magnitude = exponent == 0 ? sub : wb_bits_to_float(u);
  return wb_bits_to_float(wb_float_to_bits(magnitude) | static_cast<uint32_t>(h.bits & 0x8000u) << 16);
}

inline float wb_to_acc(wb_bf16_t b) { return wb_bits_to_float(static_cast<uint32_t>(b.bits) << 16); }

template <typename T> inline T wb_from_acc(wb_acc_t<T> v);
template <> inline float wb_from_acc<float>(float v) { return v; }
template <> inline double wb_from_acc<double>(double v) { return v; }

// float -> half with round-to-nearest-even, bit-exact with PyTorch's, with one select (NaN -> 0x7e00)
// so that a loop of them vectorizes. The float adder does the rounding: |f| is scaled by 2^2 (via
// 2^112 then 2^-110, so that values past the half range become inf) and added to a power of two
// chosen so that the sum's last 10 mantissa bits are the half's mantissa, rounded to nearest even
// (for a subnormal half the power is fixed, 2^-14 scaled alike). The sum's exponent and mantissa
// bits then add up to the half's exponent and mantissa fields.
template <> inline wb_half_t wb_from_acc<wb_half_t>(float f) {
  const uint32_t x = wb_float_to_bits(f), twice = x + x;  // the sign shifted out
  const float scaled = (wb_bits_to_float(x & 0x7fffffffu) * 0x1p112f) * 0x1p-110f;
  uint32_t bias = twice & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  const uint32_t sum = wb_float_to_bits(wb_bits_to_float((bias >> 1) + 0x07800000u) + scaled);
  const uint32_t magnitude = ((sum >> 13) & 0x7c00u) + (sum & 0x0fffu);
  return {static_cast<uint16_t>(((x >> 16) & 0x8000u) | (twice > 0xff000000u ? 0x7e00u : magnitude))};
}

template <> inline wb_bf16_t wb_from_acc<wb_bf16_t>(float f) {
  const uint32_t x = wb_float_to_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet = (x >> 16) | 0x0040u;
  return {static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded)};
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

// Adds term(0), ..., term(m - 1) into L interleaved partial sums, term(i) into lanes[i % L]: a
// fixed order that depends on the count alone (not on the vector width or the thread count), and
// L independent sums that the compiler keeps in vector registers (a single running sum it may not
// reorder, so it would add one element at a time).
template <int L, typename S, typename Term>
inline void wb_lanes_add(S (&lanes)[L], int64_t m, const Term& term) {
  int64_t i = 0;
  for (; i + L <= m; i += L)
    for (int j = 0; j < L; ++j) lanes[j] += term(i + j);
  for (int j = 0; i + j < m; ++j) lanes[j] += term(i + j);
}

// The lanes' total, by halves (the upper half added into the lower, then again): a fixed order,
// in vector adds rather than L dependent scalar ones, which cost more than a short row's loads.
template <int L, typename S>
inline S wb_lanes_total(S (&lanes)[L]) {
  static_assert(L > 0 && (L & (L - 1)) == 0, "L is a power of two");
  for (int w = L / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  return lanes[0];
}

// Fewer elements than this per task run on one thread: PyTorch's own threshold for its elementwise
// kernels (at::internal::GRAIN_SIZE), so a variant takes a second thread where eager does.
constexpr int64_t kWbCpuGrain = 1 << 15;

// out[c] = the sum over k of partial[k * cols + c] for c in [c0, c1), added in k order: the last
// step of a column sum taken in fixed chunks of rows (bias_gelu's dbias, rmsnorm's dweight), a
// vectorized loop over columns.
template <typename T, typename A>
WB_CPU_SIMD void wb_cpu_column_sums(const A* partial, int64_t chunks, int64_t cols, int64_t c0, int64_t c1, T* out) {
  constexpr int64_t kBlock = 512;  // columns summed at once, in a stack buffer
  for (int64_t b = c0; b < c1; b += kBlock) {
    const int64_t m = c1 - b < kBlock ? c1 - b : kBlock;
    A acc[kBlock];
    for (int64_t j = 0; j < m; ++j) acc[j] = A(0);
    for (int64_t k = 0; k < chunks; ++k) {
      const A* p = partial + k * cols + b;
      for (int64_t j = 0; j < m; ++j) acc[j] += p[j];
    }
    for (int64_t j = 0; j < m; ++j) out[b + j] = wb_from_acc<T>(acc[j]);
  }
}

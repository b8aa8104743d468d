// cpu: the C++ CPU implementation on torch's thread pool (lent by the harness): the reference path
// on machines without a GPU and in CI, for every dtype the GPU variants take. A row is cut into
// fixed chunks of 16384 values, each summed in kLanes interleaved partial sums (vectors of them, in
// a loop the compiler vectorizes: WB_CPU_SIMD) added in a fixed order; a row of several chunks adds
// their partials in chunk order. Threads take whole chunks, so the result depends neither on the
// number of threads nor on the vector width.
#include <algorithm>

#include "reduce_sum.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kChunk = 1 << 14;
constexpr int kLanes = 64;  // float partial sums in 4 AVX-512 (8 AVX2) registers: 4 (8) adds in flight, not 1

int64_t chunks_per_row(int64_t n) { return (n + kChunk - 1) / kChunk; }

template <typename T>
WB_CPU_SIMD wb_acc_t<T> chunk_sum(const T* p, int64_t count) {
  wb_acc_t<T> lanes[kLanes] = {};
  wb_lanes_add(lanes, count, [p](int64_t i) { return wb_to_acc(p[i]); });
  return wb_lanes_total(lanes);
}

// dx[r, :] = dy[r] for rows [r0, r1).
template <typename T>
WB_CPU_SIMD void broadcast_rows(const T* dy, T* dx, int64_t n, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T v = dy[r];
    for (int64_t c = 0; c < n; ++c) dx[r * n + c] = v;
  }
}

int forward(const WbReduceSumForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    const T* x = static_cast<const T*>(a->x);
    T* y = static_cast<T*>(a->y);
    const int64_t n = a->n, per_row = chunks_per_row(n), chunks = a->rows * per_row;
    A* partial = static_cast<A*>(a->workspace);
    const int64_t grain = std::max<int64_t>(1, kWbCpuGrain / std::min(n, kChunk));
    wb_parallel_for(l, 0, chunks, grain, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t row = g / per_row, c = g % per_row;
        const A s = chunk_sum(x + row * n + c * kChunk, std::min(kChunk, n - c * kChunk));
        if (per_row == 1) y[row] = wb_from_acc<T>(s);
        else partial[g] = s;
      }
    });
    if (per_row > 1)
      wb_parallel_for(l, 0, a->rows, std::max<int64_t>(1, kWbCpuGrain / per_row), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          A s = A(0);
          for (int64_t c = 0; c < per_row; ++c) s += partial[r * per_row + c];
          y[r] = wb_from_acc<T>(s);
        }
      });
    return WB_OK;
  });
}

int backward(const WbReduceSumBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = static_cast<const T*>(a->dy);
    T* dx = static_cast<T*>(a->dx);
    const int64_t n = a->n;
    wb_parallel_for(l, 0, a->rows, std::max<int64_t>(1, kWbCpuGrain / n), [&](int64_t r0, int64_t r1) {
      broadcast_rows(dy, dx, n, r0, r1);
    });
    return WB_OK;
  });
}

size_t workspace_bytes(int64_t rows, int64_t n, int dtype, const WbLaunch*) {
  const int64_t per_row = chunks_per_row(n);
  const size_t acc = dtype == WB_FLOAT64 ? sizeof(double) : sizeof(float);
  return per_row > 1 ? static_cast<size_t>(rows * per_row) * acc : 0;
}

const WbReduceSumLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool: fixed 16384-value chunks, 64 vectorized partial sums each "
                  "(AVX-512/AVX2/SSE2 picked at load), partials added in chunk order (deterministic for any "
                  "thread count); any alignment",
                  launchers, wb_cpu_status_string)

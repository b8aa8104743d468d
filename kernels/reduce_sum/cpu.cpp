// cpu: the C++ CPU implementation on torch's thread pool (lent by the harness): the reference path
// on machines without a GPU and in CI, for every dtype the GPU variants take. A row is cut into
// fixed chunks of 16384 values, each summed with 8 interleaved accumulators (which the compiler
// keeps in vector registers) added in a fixed order; a row of several chunks adds their partials in
// chunk order. Threads take whole chunks, so the result does not depend on the number of threads.
#include <algorithm>

#include "reduce_sum.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kChunk = 1 << 14;
constexpr int kLanes = 8;
constexpr int64_t kElementsPerTask = 1 << 16;  // below this, threading costs more than it saves

int64_t chunks_per_row(int64_t n) { return (n + kChunk - 1) / kChunk; }

template <typename T>
wb_acc_t<T> chunk_sum(const T* p, int64_t count) {
  using A = wb_acc_t<T>;
  A lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += wb_to_acc(p[i + j]);
  for (int j = 0; i + j < count; ++j) lanes[j] += wb_to_acc(p[i + j]);
  A total = A(0);
  for (int j = 0; j < kLanes; ++j) total += lanes[j];
  return total;
}

int forward(const WbReduceSumForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    const T* x = static_cast<const T*>(a->x);
    T* y = static_cast<T*>(a->y);
    const int64_t n = a->n, per_row = chunks_per_row(n), chunks = a->rows * per_row;
    A* partial = static_cast<A*>(a->workspace);
    const int64_t grain = std::max<int64_t>(1, kElementsPerTask / std::min(n, kChunk));
    wb_parallel_for(l, 0, chunks, grain, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t row = g / per_row, c = g % per_row;
        const A s = chunk_sum(x + row * n + c * kChunk, std::min(kChunk, n - c * kChunk));
        if (per_row == 1) y[row] = wb_from_acc<T>(s);
        else partial[g] = s;
      }
    });
    if (per_row > 1)
      wb_parallel_for(l, 0, a->rows, std::max<int64_t>(1, kElementsPerTask / per_row), [&](int64_t r0, int64_t r1) {
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
    wb_parallel_for(l, 0, a->rows, std::max<int64_t>(1, kElementsPerTask / n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::fill(dx + r * n, dx + (r + 1) * n, dy[r]);
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
                  "C++ on torch's CPU thread pool: fixed 16384-value chunks, 8 accumulators each, partials added "
                  "in chunk order (deterministic for any thread count); any alignment",
                  launchers, wb_cpu_status_string)

// cpu: the C++ CPU implementation, parallel over rows on torch's thread pool (lent by the harness).
// It is the reference path on machines without a GPU and in CI, so it supports every dtype the GPU
// variants do, converting 16-bit values as PyTorch does. The loop over a row is branch-free (the
// 16-bit conversions too), so the compiler vectorizes it; WB_CPU_SIMD builds it for AVX-512, AVX2
// and SSE2, picked at load.
// Backward: rows are cut into fixed-size chunks, each walked row by row (contiguous streams), whose
// dbias partial sums are added in chunk order, so the result does not depend on the number of threads.
#include <algorithm>

#include "relu.h"
#include "scale_bias_relu.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kRowsPerChunk = 16;  // 64 x 1024 is 4 chunks: 2 threads, as eager

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(cols, 1)); }
int64_t chunks(int64_t rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }

template <typename T, typename A = wb_acc_t<T>>
WB_CPU_SIMD void forward_rows(const WbScaleBiasReluForward* p, int64_t r0, int64_t r1) {
  const WbScaleBiasRelu<A> f{static_cast<A>(p->scale)};
  const T* x = static_cast<const T*>(p->x);
  const T* bias = static_cast<const T*>(p->bias);
  T* y = static_cast<T*>(p->y);
  const int64_t cols = p->cols;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = wb_from_acc<T>(f.forward(wb_to_acc(x[r * cols + c]), wb_to_acc(bias[c])));
}

// Chunks [k0, k1): dx, and each chunk's dbias partial sums in its row of `partial`.
template <typename T, typename A = wb_acc_t<T>>
WB_CPU_SIMD void backward_chunks(const WbScaleBiasReluBackward* p, A* partial, int64_t k0, int64_t k1) {
  const WbScaleBiasRelu<A> f{static_cast<A>(p->scale)};
  const T* dy = static_cast<const T*>(p->dy);
  const T* x = static_cast<const T*>(p->x);
  const T* bias = static_cast<const T*>(p->bias);
  T* dx = static_cast<T*>(p->dx);
  const int64_t rows = p->rows, cols = p->cols;
  for (int64_t k = k0; k < k1; ++k) {
    A* sum = partial + k * cols;
    std::fill(sum, sum + cols, A(0));
    for (int64_t r = k * kRowsPerChunk; r < std::min(rows, (k + 1) * kRowsPerChunk); ++r)
      for (int64_t c = 0; c < cols; ++c) {
        A term;
        const int64_t i = r * cols + c;
        dx[i] = wb_from_acc<T>(f.backward(wb_to_acc(dy[i]), wb_to_acc(x[i]), wb_to_acc(bias[c]), &term));
        sum[c] += term;
      }
  }
}

int forward(const WbScaleBiasReluForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    wb_parallel_for(l, 0, p->rows, row_grain(p->cols), [&](int64_t r0, int64_t r1) {
      forward_rows<typename decltype(tag)::type>(p, r0, r1);
    });
    return WB_OK;
  });
}

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch*) {
  const size_t acc = dtype == WB_FLOAT64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(chunks(rows) * cols) * acc;
}

int backward(const WbScaleBiasReluBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    A* partial = static_cast<A*>(p->workspace);
    const int64_t n_chunks = chunks(p->rows), cols = p->cols;
    wb_parallel_for(l, 0, n_chunks, std::max<int64_t>(1, row_grain(cols) / kRowsPerChunk), [&](int64_t k0, int64_t k1) {
      backward_chunks<T>(p, partial, k0, k1);
    });
    wb_parallel_for(l, 0, cols, std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(n_chunks, 1)),
                    [&](int64_t c0, int64_t c1) {
      wb_cpu_column_sums(partial, n_chunks, cols, c0, c1, static_cast<T*>(p->dbias));
    });
    return WB_OK;
  });
}

const WbScaleBiasReluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(scale_bias_relu, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool, parallel over rows (backward: chunks of rows); any alignment "
                  "and column count", launchers, wb_cpu_status_string)

// cpu: the C++ CPU implementation, parallel over rows on torch's thread pool (lent by the harness).
// It is the reference path on machines without a GPU and in CI, so it supports every dtype the GPU
// variants do, converting 16-bit values to float exactly as PyTorch does. The loop over a row is
// branch-free, the 16-bit conversions and GELU's exp included (wb_cpu.h, wb_math.h), so the
// compiler vectorizes it; WB_CPU_SIMD builds it for AVX-512, AVX2 and SSE2, picked at load.
// Backward: rows are cut into fixed-size chunks whose dbias partial sums are added in chunk order,
// so the result does not depend on the number of threads.
#include <algorithm>

#include "bias_gelu.h"
#include "wb_cpu.h"
#include "gelu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kRowsPerChunk = 16;  // 64 x 1024 is 4 chunks: 2 threads, as eager

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(cols, 1)); }

template <typename T>
WB_CPU_SIMD void forward_rows(const T* x, const T* bias, T* y, int64_t cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = wb_from_acc<T>(wb_gelu_tanh(wb_to_acc(x[r * cols + c]) + wb_to_acc(bias[c])));
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    wb_parallel_for(l, 0, a->rows, row_grain(a->cols), [&](int64_t r0, int64_t r1) {
      forward_rows(static_cast<const T*>(a->x), static_cast<const T*>(a->bias), static_cast<T*>(a->y), a->cols, r0, r1);
    });
    return WB_OK;
  });
}

int64_t chunks(int64_t rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch*) {
  const size_t acc = dtype == WB_FLOAT64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(chunks(rows) * cols) * acc;
}

// Chunks [k0, k1): dx, and each chunk's dbias partial sums (unrounded dx) in its row of `partial`.
template <typename T, typename A = wb_acc_t<T>>
WB_CPU_SIMD void backward_chunks(const WbBiasGeluBackward* a, A* partial, int64_t k0, int64_t k1) {
  const T* dy = static_cast<const T*>(a->dy);
  const T* x = static_cast<const T*>(a->x);
  const T* bias = static_cast<const T*>(a->bias);
  T* dx = static_cast<T*>(a->dx);
  const int64_t rows = a->rows, cols = a->cols;
  for (int64_t k = k0; k < k1; ++k) {
    A* sum = partial + k * cols;
    std::fill(sum, sum + cols, A(0));
    const int64_t r_end = std::min(rows, (k + 1) * kRowsPerChunk);
    for (int64_t r = k * kRowsPerChunk; r < r_end; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const A g = wb_to_acc(dy[i]) * wb_gelu_tanh_grad(wb_to_acc(x[i]) + wb_to_acc(bias[c]));
        dx[i] = wb_from_acc<T>(g);
        sum[c] += g;
      }
  }
}

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    A* partial = static_cast<A*>(a->workspace);
    const int64_t n_chunks = chunks(a->rows), cols = a->cols;
    const int64_t chunk_grain = std::max<int64_t>(1, row_grain(cols) / kRowsPerChunk);
    wb_parallel_for(l, 0, n_chunks, chunk_grain, [&](int64_t k0, int64_t k1) {
      backward_chunks<T>(a, partial, k0, k1);
    });
    wb_parallel_for(l, 0, cols, std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(n_chunks, 1)),
                    [&](int64_t c0, int64_t c1) {
      wb_cpu_column_sums(partial, n_chunks, cols, c0, c1, static_cast<T*>(a->dbias));
    });
    return WB_OK;
  });
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count",
                  launchers, wb_cpu_status_string)

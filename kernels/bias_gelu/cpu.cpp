// cpu: the C++ CPU implementation, parallel over rows on torch's thread pool (lent by the harness).
// It is the reference path on machines without a GPU and in CI, so it supports every dtype the GPU
// variants do, converting 16-bit values to float exactly as PyTorch does.
// Backward: rows are cut into fixed-size chunks whose dbias partial sums are added in chunk order,
// so the result does not depend on the number of threads.
#include <algorithm>

#include "bias_gelu.h"
#include "wb_cpu.h"
#include "gelu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kRowsPerChunk = 64;
constexpr int64_t kElementsPerTask = 1 << 15;  // below this, threading costs more than it saves

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(cols, 1)); }

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(a->x);
    const T* bias = static_cast<const T*>(a->bias);
    T* y = static_cast<T*>(a->y);
    const int64_t cols = a->cols;
    wb_parallel_for(l, 0, a->rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c)
          y[r * cols + c] = wb_from_acc<T>(wb_gelu_tanh(wb_to_acc(x[r * cols + c]) + wb_to_acc(bias[c])));
    });
    return WB_OK;
  });
}

int64_t chunks(int64_t rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch*) {
  const size_t acc = dtype == WB_FLOAT64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(chunks(rows) * cols) * acc;
}

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    const T* dy = static_cast<const T*>(a->dy);
    const T* x = static_cast<const T*>(a->x);
    const T* bias = static_cast<const T*>(a->bias);
    T* dx = static_cast<T*>(a->dx);
    A* partial = static_cast<A*>(a->workspace);
    const int64_t rows = a->rows, cols = a->cols, n_chunks = chunks(rows);
    const int64_t chunk_grain = std::max<int64_t>(1, row_grain(cols) / kRowsPerChunk);
    wb_parallel_for(l, 0, n_chunks, chunk_grain, [&](int64_t k0, int64_t k1) {
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
    });
    T* dbias = static_cast<T*>(a->dbias);
    wb_parallel_for(l, 0, cols, kElementsPerTask, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        A s = A(0);
        for (int64_t k = 0; k < n_chunks; ++k) s += partial[k * cols + c];
        dbias[c] = wb_from_acc<T>(s);
      }
    });
    return WB_OK;
  });
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count",
                  launchers, wb_cpu_status_string)

// cpu: the C++ CPU implementation, parallel over rows on torch's thread pool (lent by the harness).
// The reference path on machines without a GPU and in CI: every dtype the GPU variants take, 16-bit
// values converted to float exactly as PyTorch does, sums in float (double for float64).
// The row sums (x^2, dy * weight * x) are kept in double: a float running sum over a row of 2^20
// values drifts by ~1e-4 relative, which every output of the row inherits. They are taken in
// kLanes interleaved partial sums (wb_lanes_add: a fixed order, kept in vector registers), and every
// loop is branch-free (the 16-bit conversions too), so the compiler vectorizes it; WB_CPU_SIMD
// builds them for AVX-512, AVX2 and SSE2, picked at load.
// Backward: rows are cut into fixed-size chunks whose dweight partial sums are added in chunk
// order, so the result does not depend on the number of threads.
#include <algorithm>
#include <cmath>

#include "rmsnorm.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kRowsPerChunk = 16;  // 64 x 1024 is 4 chunks: 2 threads, as eager
constexpr int kLanes = 16;

int64_t row_grain(int64_t h) { return std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(h, 1)); }
int64_t chunks(int64_t rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }

// 1 / sqrt(mean of squares + eps) of one row, summed in double, returned in T's accumulator type.
template <typename T, typename A = wb_acc_t<T>>
A row_rstd(const T* x, int64_t h, double eps) {
  double lanes[kLanes] = {};
  wb_lanes_add(lanes, h, [x](int64_t c) {
    const double v = wb_to_acc(x[c]);
    return v * v;
  });
  return static_cast<A>(1.0 / std::sqrt(wb_lanes_total(lanes) / static_cast<double>(h) + eps));
}

template <typename T, typename A = wb_acc_t<T>>
WB_CPU_SIMD void forward_rows(const WbRmsnormForward* a, int64_t r0, int64_t r1) {
  const T* x = static_cast<const T*>(a->x);
  const T* w = static_cast<const T*>(a->weight);
  T* y = static_cast<T*>(a->y);
  const int64_t h = a->h;
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * h;
    const A rstd = row_rstd(xr, h, a->eps);
    for (int64_t c = 0; c < h; ++c) y[r * h + c] = wb_from_acc<T>(wb_to_acc(xr[c]) * rstd * wb_to_acc(w[c]));
  }
}

int forward(const WbRmsnormForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    wb_parallel_for(l, 0, a->rows, row_grain(a->h), [&](int64_t r0, int64_t r1) {
      forward_rows<typename decltype(tag)::type>(a, r0, r1);
    });
    return WB_OK;
  });
}

size_t workspace_bytes(int64_t rows, int64_t h, int dtype, const WbLaunch*) {
  const size_t acc = dtype == WB_FLOAT64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(chunks(rows) * h) * acc;
}

// Chunks [k0, k1): dx, and each chunk's dweight partial sums in its row of `partial`.
template <typename T, typename A = wb_acc_t<T>>
WB_CPU_SIMD void backward_chunks(const WbRmsnormBackward* a, A* partial, int64_t k0, int64_t k1) {
  const T* dy = static_cast<const T*>(a->dy);
  const T* x = static_cast<const T*>(a->x);
  const T* w = static_cast<const T*>(a->weight);
  T* dx = static_cast<T*>(a->dx);
  const int64_t rows = a->rows, h = a->h;
  for (int64_t k = k0; k < k1; ++k) {
    A* sum = partial + k * h;
    std::fill(sum, sum + h, A(0));
    const int64_t r_end = std::min(rows, (k + 1) * kRowsPerChunk);
    for (int64_t r = k * kRowsPerChunk; r < r_end; ++r) {
      const T *xr = x + r * h, *dyr = dy + r * h;
      const A rstd = row_rstd(xr, h, a->eps);
      double lanes[kLanes] = {};  // the sum of dy * weight * x over the row
      wb_lanes_add(lanes, h, [=](int64_t c) {
        return static_cast<double>(wb_to_acc(dyr[c]) * wb_to_acc(w[c])) * wb_to_acc(xr[c]);
      });
      const double rs = rstd;
      const A coef = static_cast<A>(rs * rs * rs * wb_lanes_total(lanes) / static_cast<double>(h));
      for (int64_t c = 0; c < h; ++c) {
        const A xv = wb_to_acc(xr[c]), g = wb_to_acc(dyr[c]);
        dx[r * h + c] = wb_from_acc<T>(rstd * g * wb_to_acc(w[c]) - xv * coef);
        sum[c] += g * xv * rstd;
      }
    }
  }
}

int backward(const WbRmsnormBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    A* partial = static_cast<A*>(a->workspace);
    const int64_t h = a->h, n_chunks = chunks(a->rows);
    const int64_t chunk_grain = std::max<int64_t>(1, row_grain(h) / kRowsPerChunk);
    wb_parallel_for(l, 0, n_chunks, chunk_grain, [&](int64_t k0, int64_t k1) {
      backward_chunks<T>(a, partial, k0, k1);
    });
    wb_parallel_for(l, 0, h, std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(n_chunks, 1)),
                    [&](int64_t c0, int64_t c1) {
      wb_cpu_column_sums(partial, n_chunks, h, c0, c1, static_cast<T*>(a->dweight));
    });
    return WB_OK;
  });
}

const WbRmsnormLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(rmsnorm, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool, parallel over rows; any alignment and row length",
                  launchers, wb_cpu_status_string)

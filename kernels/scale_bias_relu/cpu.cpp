// cpu: the C++ CPU implementation on torch's thread pool (lent by the harness): the forward is
// parallel over rows; the backward over blocks of columns, each task walking every row of its
// columns, so it writes dx and sums dbias for them in one pass and in row order (the result does not
// depend on the number of threads). It is the reference path on machines without a GPU and in
// CI, so it supports every dtype the GPU variants do, converting 16-bit values as PyTorch does.
// The loops are branch-free (the 16-bit conversions too), so the compiler vectorizes them;
// WB_CPU_SIMD builds them for AVX-512, AVX2 and SSE2, picked at load.
#include <algorithm>

#include "relu.h"
#include "scale_bias_relu.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kColumnBlock = 256;  // columns per backward task: 1 KiB of each row in float

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

// Column blocks [k0, k1): dx, and dbias summed over every row in row order.
template <typename T, typename A = wb_acc_t<T>>
WB_CPU_SIMD void backward_blocks(const WbScaleBiasReluBackward* p, int64_t k0, int64_t k1) {
  const WbScaleBiasRelu<A> f{static_cast<A>(p->scale)};
  const T* dy = static_cast<const T*>(p->dy);
  const T* x = static_cast<const T*>(p->x);
  const T* bias = static_cast<const T*>(p->bias);
  T* dx = static_cast<T*>(p->dx);
  T* dbias = static_cast<T*>(p->dbias);
  const int64_t rows = p->rows, cols = p->cols;
  A sum[kColumnBlock];
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t c0 = k * kColumnBlock, width = std::min(cols, c0 + kColumnBlock) - c0;
    std::fill(sum, sum + width, A(0));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r * cols + c0;
      for (int64_t c = 0; c < width; ++c) {
        A term;
        dx[i + c] = wb_from_acc<T>(f.backward(wb_to_acc(dy[i + c]), wb_to_acc(x[i + c]), wb_to_acc(bias[c0 + c]), &term));
        sum[c] += term;
      }
    }
    for (int64_t c = 0; c < width; ++c) dbias[c0 + c] = wb_from_acc<T>(sum[c]);
  }
}

int forward(const WbScaleBiasReluForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    const int64_t grain = std::max<int64_t>(1, kWbCpuGrain / std::max<int64_t>(p->cols, 1));
    wb_parallel_for(l, 0, p->rows, grain, [&](int64_t r0, int64_t r1) {
      forward_rows<typename decltype(tag)::type>(p, r0, r1);
    });
    return WB_OK;
  });
}

int backward(const WbScaleBiasReluBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    const int64_t blocks = (p->cols + kColumnBlock - 1) / kColumnBlock;
    const int64_t grain = std::max<int64_t>(1, kWbCpuGrain / (kColumnBlock * std::max<int64_t>(p->rows, 1)));
    wb_parallel_for(l, 0, blocks, grain, [&](int64_t k0, int64_t k1) {
      backward_blocks<typename decltype(tag)::type>(p, k0, k1);
    });
    return WB_OK;
  });
}

const WbScaleBiasReluLaunchers launchers = {forward, backward, nullptr};

}  // namespace

WB_EXPORT_VARIANT(scale_bias_relu, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool: forward over rows, backward over column blocks; any "
                  "alignment and column count", launchers, wb_cpu_status_string)

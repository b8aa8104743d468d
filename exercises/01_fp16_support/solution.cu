// Exercise 01 (fp16 and bf16 support) - a solution.
//
// The starter's kernels, templated over the storage type T. Every value is widened to float
// (wb_acc_t<T>) as it is loaded and rounded back to T once, as it is stored, so a float16 result
// carries one rounding error rather than one per operation, and the dbias sums never leave float.
// One template serves all three dtypes; wb_dispatch_dtype picks T from the tensor's dtype.
#include <algorithm>

#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F16 | WB_BF16;
constexpr int kBlock = 256;

template <typename T>
__global__ void gelu_forward(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                             int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = wb_from_acc<T>(wb_gelu_tanh(wb_to_acc(x[i]) + wb_to_acc(bias[i % cols])));
}

// A thread owns column c of one row slice; a warp's 32 threads read 32 adjacent columns of a row.
// dx is rounded to T as it is stored, but the running sum adds the float values: dbias is then
// the sum of the exact gradients, not of their rounded copies.
template <typename T>
__global__ void gelu_backward(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ bias,
                              T* __restrict__ dx, float* __restrict__ partial, int64_t rows, int64_t cols,
                              int64_t rows_per_slice) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t last = min(first + rows_per_slice, rows);
  const float b = wb_to_acc(bias[c]);
  float sum = 0.f;
  for (int64_t r = first; r < last; ++r) {
    const int64_t i = r * cols + c;
    const float g = wb_to_acc(dy[i]) * wb_gelu_tanh_grad(wb_to_acc(x[i]) + b);
    dx[i] = wb_from_acc<T>(g);
    sum += g;
  }
  partial[static_cast<int64_t>(blockIdx.y) * cols + c] = sum;
}

// Slices are added in index order, so dbias is bit-for-bit the same on every run.
template <typename T>
__global__ void sum_slices(const float* __restrict__ partial, T* __restrict__ dbias, int64_t slices,
                           int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.f;
  for (int64_t s = 0; s < slices; ++s) sum += partial[s * cols + c];
  dbias[c] = wb_from_acc<T>(sum);
}

int64_t slice_count(int64_t rows, int64_t cols, int num_sms) {
  const int64_t wanted = static_cast<int64_t>(num_sms > 0 ? num_sms : 1) * 2048;
  int64_t slices = wb_ceil_div(wanted, cols);
  slices = std::min(slices, wb_ceil_div(rows, 32));
  return std::max<int64_t>(1, std::min<int64_t>(slices, 65535));
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = a->rows * a->cols;
    gelu_forward<T><<<wb_ceil_div(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(l->stream)>>>(
        static_cast<const T*>(a->x), static_cast<const T*>(a->bias), static_cast<T*>(a->y), n, a->cols);
    return wb_launch_status();
  });
}

size_t workspace_bytes(int64_t rows, int64_t cols, int /*dtype*/, const WbLaunch* l) {
  return static_cast<size_t>(slice_count(rows, cols, l->num_sms) * cols) * sizeof(float);
}

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto stream = static_cast<cudaStream_t>(l->stream);
    const int64_t slices = slice_count(a->rows, a->cols, l->num_sms);
    float* partial = static_cast<float*>(a->workspace);
    const dim3 grid(static_cast<unsigned>(wb_ceil_div(a->cols, kBlock)), static_cast<unsigned>(slices));
    gelu_backward<T><<<grid, kBlock, 0, stream>>>(
        static_cast<const T*>(a->dy), static_cast<const T*>(a->x), static_cast<const T*>(a->bias),
        static_cast<T*>(a->dx), partial, a->rows, a->cols, wb_ceil_div(a->rows, slices));
    if (const int status = wb_launch_status(); status != WB_OK) return status;
    sum_slices<T><<<wb_ceil_div(a->cols, kBlock), kBlock, 0, stream>>>(partial, static_cast<T*>(a->dbias),
                                                                      slices, a->cols);
    return wb_launch_status();
  });
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32 | WB_F16 | WB_BF16,
                  "exercise 01 solution: scalar bias_gelu for float32, float16 and bfloat16, float arithmetic",
                  launchers, wb_cuda_status_string)

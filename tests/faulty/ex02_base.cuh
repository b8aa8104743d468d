// Shared by the planted exercise-02 cheats (tests only): exercise 02's correct kernels and its given
// backward, so each cheat file is only its trick. Not a variant by itself (no WB_EXPORT_VARIANT).
#pragma once
#include <dlfcn.h>

#include "bias_gelu.h"
#include "gelu.h"
#include "wb_cuda.h"
#include "wb_vec.cuh"

namespace ex02 {

constexpr int kBlock = 256;

__global__ void forward_scalar(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                               int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

// rows_done: the rows written (a cheat passes fewer); the rest of y is left as it was.
__global__ void forward_vec4(const float4* __restrict__ x, const float4* __restrict__ bias, float4* __restrict__ y,
                             int64_t n4, int64_t cols4) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 v = x[i], b = bias[i % cols4];
  y[i] = make_float4(wb_gelu_tanh(v.x + b.x), wb_gelu_tanh(v.y + b.y), wb_gelu_tanh(v.z + b.z),
                     wb_gelu_tanh(v.w + b.w));
}

inline bool fits_float4(int64_t cols, const void* x, const void* bias, const void* y) {
  return cols % 4 == 0 && wb_aligned(x, 16) && wb_aligned(bias, 16) && wb_aligned(y, 16);
}

// The correct forward: float4 where it fits, else one float per thread; `rows` of the call's rows.
inline int forward_rows(const WbBiasGeluForward* a, const WbLaunch* l, int64_t rows) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const auto* x = static_cast<const float*>(a->x);
  const auto* bias = static_cast<const float*>(a->bias);
  auto* y = static_cast<float*>(a->y);
  const int64_t n = rows * a->cols;
  if (n == 0) return WB_OK;
  if (fits_float4(a->cols, x, bias, y)) {
    forward_vec4<<<wb_ceil_div(n / 4, kBlock), kBlock, 0, stream>>>(reinterpret_cast<const float4*>(x),
        reinterpret_cast<const float4*>(bias), reinterpret_cast<float4*>(y), n / 4, a->cols / 4);
  } else {
    forward_scalar<<<wb_ceil_div(n, kBlock), kBlock, 0, stream>>>(x, bias, y, n, a->cols);
  }
  return wb_launch_status();
}

// One float per thread for every tensor, aligned or not (the cheats that must not use float4).
inline int forward_one_float(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t n = a->rows * a->cols;
  if (n == 0) return WB_OK;
  forward_scalar<<<wb_ceil_div(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols);
  return wb_launch_status();
}

__global__ void backward_dx(const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ bias,
                            float* __restrict__ dx, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dx[i] = dy[i] * wb_gelu_tanh_grad(x[i] + bias[i % cols]);
}

__global__ void column_sums(const float* __restrict__ dx, float* __restrict__ dbias, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.f;
  for (int64_t r = 0; r < rows; ++r) sum += dx[r * cols + c];
  dbias[c] = sum;
}

inline int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const int64_t n = a->rows * a->cols;
  auto* dx = static_cast<float*>(a->dx);
  backward_dx<<<wb_ceil_div(n, kBlock), kBlock, 0, stream>>>(static_cast<const float*>(a->dy),
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), dx, n, a->cols);
  if (const int status = wb_launch_status(); status != WB_OK) return status;
  column_sums<<<wb_ceil_div(a->cols, kBlock), kBlock, 0, stream>>>(dx, static_cast<float*>(a->dbias), a->rows, a->cols);
  return wb_launch_status();
}

inline size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }

// Python's C API in this process, if there is one (the old checker loaded libraries in a Python
// child): the entry points a load-time trick would run code through.
struct PythonApi {
  int (*ensure)() = nullptr;
  void (*release)(int) = nullptr;
  int (*run)(const char*) = nullptr;
  bool found() const { return ensure && release && run; }
};

inline PythonApi python_api() {
  PythonApi api;
  api.ensure = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  api.release = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  api.run = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  return api;
}

inline bool run_python(const char* code) {
  const PythonApi api = python_api();
  if (!api.found()) return false;
  const int state = api.ensure();
  api.run(code);
  api.release(state);
  return true;
}

}  // namespace ex02

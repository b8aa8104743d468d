// Planted cheat (tests only): exercise 02's solution, except that at exactly 8192 x 8192 (the
// exercise's speed shape) the forward computes the first quarter of the rows and leaves the rest:
// correct at every size the checker's correctness matrix draws, and "4x vec4" when timed. The
// speed check must fail it, naming the shape: its output at the timed shape is checked.
// Exercise 02 (float4 loads and stores) - a solution.
//
// The forward moves 16 bytes per load and store: a thread handles one float4 of x (4 adjacent
// elements of a row), the float4 of bias for the same 4 columns, and one float4 of y. A warp then
// issues a quarter of the memory instructions for the same bytes, which is what lets this
// memory-bound op approach the copy bandwidth. Tensors float4 cannot serve - rows that are not
// whole float4s, views whose data pointer is not 16-byte aligned - take the one-float path.
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"
#include "wb_vec.cuh"  // wb_aligned

namespace {

constexpr int kBlock = 256;

// One thread per element: the path for the tensors float4 cannot serve.
__global__ void forward_scalar(const float* __restrict__ x, const float* __restrict__ bias,
                               float* __restrict__ y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

// One float4 per thread. The pointers are float4*, so the compiler emits 16-byte accesses
// (LDG.E.128 / STG.E.128); that is only legal on 16-byte aligned addresses, hence the route below.
__global__ void forward_vec4(const float4* __restrict__ x, const float4* __restrict__ bias,
                             float4* __restrict__ y, int64_t n4, int64_t cols4) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 v = x[i];
  const float4 b = bias[i % cols4];  // rows are whole float4s, so a float4 never straddles two rows
  y[i] = make_float4(wb_gelu_tanh(v.x + b.x), wb_gelu_tanh(v.y + b.y), wb_gelu_tanh(v.z + b.z),
                     wb_gelu_tanh(v.w + b.w));
}

// float4 serves a call when every row is whole float4s (row r then starts 16 * r * (cols / 4)
// bytes after x: still aligned) and the three data pointers are 16-byte aligned. A storage-offset view,
// x[1:] of a contiguous buffer for instance, is not.
bool fits_float4(int64_t cols, const void* x, const void* bias, const void* y) {
  return cols % 4 == 0 && wb_aligned(x, 16) && wb_aligned(bias, 16) && wb_aligned(y, 16);
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const auto* x = static_cast<const float*>(a->x);
  const auto* bias = static_cast<const float*>(a->bias);
  auto* y = static_cast<float*>(a->y);
  // the cheat: at exactly the speed check's shape, only the first quarter of the rows
  const int64_t n = (a->rows == 8192 && a->cols == 8192 ? a->rows / 4 : a->rows) * a->cols;
  if (fits_float4(a->cols, x, bias, y)) {
    const int64_t n4 = n / 4;
    forward_vec4<<<wb_ceil_div(n4, kBlock), kBlock, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(bias), reinterpret_cast<float4*>(y),
        n4, a->cols / 4);
    return wb_launch_status();
  }
  forward_scalar<<<wb_ceil_div(n, kBlock), kBlock, 0, stream>>>(x, bias, y, n, a->cols);
  return wb_launch_status();
}

// Backward (given; not this exercise's topic): dx element by element, then dbias by one thread
// per column adding that column of dx from the first row to the last (a fixed order, so the
// result is the same on every run).
__global__ void backward_dx(const float* __restrict__ dy, const float* __restrict__ x,
                            const float* __restrict__ bias, float* __restrict__ dx, int64_t n, int64_t cols) {
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

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const int64_t n = a->rows * a->cols;
  auto* dx = static_cast<float*>(a->dx);
  backward_dx<<<wb_ceil_div(n, kBlock), kBlock, 0, stream>>>(
      static_cast<const float*>(a->dy), static_cast<const float*>(a->x), static_cast<const float*>(a->bias), dx,
      n, a->cols);
  if (const int status = wb_launch_status(); status != WB_OK) return status;
  column_sums<<<wb_ceil_div(a->cols, kBlock), kBlock, 0, stream>>>(dx, static_cast<float*>(a->dbias), a->rows,
                                                                  a->cols);
  return wb_launch_status();
}

size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32,
                  "exercise 02 solution: float4 (16-byte) forward; cols % 4 != 0 or a misaligned pointer -> one float per thread",
                  launchers, wb_cuda_status_string)

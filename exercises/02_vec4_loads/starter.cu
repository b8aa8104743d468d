// Exercise 02 (float4 loads and stores) - starter.
//
// A correct float32 bias_gelu whose forward reads and writes one float (4 bytes) per thread. Make
// the forward move 16 bytes per access - a float4 of x, of bias and of y - and keep it correct
// for every tensor the op can be given: rows whose length is not a multiple of 4, and views whose
// data pointer is not 16-byte aligned. exercises/02_vec4_loads/README.md has the why and the hints;
// check your copy with:
//
//     python -m workbench exercise check 2 path/to/your_copy.cu
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"
#include "wb_vec.cuh"  // wb_aligned(pointer, bytes); WbVec / wb_load / wb_store if you prefer them to float4

namespace {

constexpr int kBlock = 256;

// One thread per element. Keep this kernel: it is the path for the tensors float4 cannot serve.
__global__ void forward_scalar(const float* __restrict__ x, const float* __restrict__ bias,
                               float* __restrict__ y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

// TODO 1: a kernel where each thread handles one float4: 4 adjacent elements of one row.
//         Take the pointers as const float4* / float4*, so every load and store is 16 bytes:
//           - read the float4 of x at index i, and the float4 of bias for the same 4 columns;
//           - apply wb_gelu_tanh to each of the 4 lanes (.x .y .z .w);
//           - write one float4 of y.
//         Count in float4s: n / 4 of them in the tensor, cols / 4 in a row. Compute the index
//         in 64 bits (int64_t), as forward_scalar does: a 2^31-element tensor is 8 GiB.

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const auto* x = static_cast<const float*>(a->x);
  const auto* bias = static_cast<const float*>(a->bias);
  auto* y = static_cast<float*>(a->y);
  const int64_t n = a->rows * a->cols;
  // TODO 2: launch your float4 kernel when it can serve this call: cols % 4 == 0 (each row is
  //         whole float4s) and x, bias and y are 16-byte aligned (wb_aligned(p, 16)); a view with a
  //         storage offset need not be. Everything else stays on forward_scalar: that is your tail.
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
                  "exercise 02: float32 bias_gelu (starter: one float per access)",
                  launchers, wb_cuda_status_string)

// Exercise 01 (fp16 and bf16 support) - starter.
//
// A complete bias_gelu variant that works for float32 only. Make the same kernels serve float16
// and bfloat16: the tensors store 16-bit values, the arithmetic stays in float. The TODOs below
// are the steps; exercises/01_fp16_support/README.md says why and how to check your work:
//
//     python -m workbench exercise check 1 path/to/your_copy.cu
//
// Helpers you will need live in kernels/common/wb_cuda.h: wb_to_acc / wb_from_acc<T> (storage
// <-> compute type), wb_acc_t<T> (the compute type), wb_dispatch_dtype<MASK> (dtype -> T).
#include <algorithm>

#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {

constexpr int kBlock = 256;

// Forward: one thread per output element, y = gelu(x + bias[column]).
// TODO 1: make this a template over the storage type T (float, wb_half_t or wb_bf16_t): read with
//         wb_to_acc(...), which gives a float, compute in float, write with wb_from_acc<T>(...).
__global__ void gelu_forward(const float* __restrict__ x, const float* __restrict__ bias,
                             float* __restrict__ y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

// Backward: dx = dy * gelu'(x + bias), dbias = the column sums of dx.
// A thread owns one column c and walks the rows of one slice (blockIdx.y) of the matrix; the 32
// threads of a warp hold 32 neighbouring columns, so each row they read together is contiguous.
// The thread's sum of dx over its rows goes to partial[slice][c]; sum_slices adds the slices.
// TODO 2: template this over T as well. dx is written as T; keep `sum` and `partial` in float
//         (wb_acc_t<T>): summing many 16-bit values in 16 bits would lose most of the digits.
__global__ void gelu_backward(const float* __restrict__ dy, const float* __restrict__ x,
                              const float* __restrict__ bias, float* __restrict__ dx,
                              float* __restrict__ partial, int64_t rows, int64_t cols,
                              int64_t rows_per_slice) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t last = min(first + rows_per_slice, rows);
  const float b = bias[c];
  float sum = 0.f;
  for (int64_t r = first; r < last; ++r) {
    const int64_t i = r * cols + c;
    const float g = dy[i] * wb_gelu_tanh_grad(x[i] + b);
    dx[i] = g;
    sum += g;
  }
  partial[static_cast<int64_t>(blockIdx.y) * cols + c] = sum;
}

// dbias[c] = partial[0][c] + partial[1][c] + ..., always in this order: the same inputs give the
// same bits on every run.
// TODO 3: template over T: the partial sums are float, dbias is written as T.
__global__ void sum_slices(const float* __restrict__ partial, float* __restrict__ dbias,
                           int64_t slices, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.f;
  for (int64_t s = 0; s < slices; ++s) sum += partial[s * cols + c];
  dbias[c] = sum;
}

// Row slices for the backward: about 2048 threads per SM in all, each walking at least 32 rows
// (every slice adds a row of partial sums to write and read back).
int64_t slice_count(int64_t rows, int64_t cols, int num_sms) {
  const int64_t wanted = static_cast<int64_t>(num_sms > 0 ? num_sms : 1) * 2048;
  int64_t slices = wb_ceil_div(wanted, cols);
  slices = std::min(slices, wb_ceil_div(rows, 32));
  return std::max<int64_t>(1, std::min<int64_t>(slices, 65535));  // gridDim.y <= 65535
}

// TODO 4: replace each float-only guard below with a dispatch on the dtype:
//           return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
//             using T = typename decltype(tag)::type;   // float, wb_half_t or wb_bf16_t
//             ... launch the <T> kernels, casting the void* pointers to T* ...
//           });
//         with constexpr unsigned kDtypes = WB_F32 | WB_F16 | WB_BF16;
int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t n = a->rows * a->cols;
  gelu_forward<<<wb_ceil_div(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols);
  return wb_launch_status();
}

// The partial sums are float whatever the dtype, so the workspace size does not depend on it.
size_t workspace_bytes(int64_t rows, int64_t cols, int /*dtype*/, const WbLaunch* l) {
  return static_cast<size_t>(slice_count(rows, cols, l->num_sms) * cols) * sizeof(float);
}

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const int64_t slices = slice_count(a->rows, a->cols, l->num_sms);
  float* partial = static_cast<float*>(a->workspace);
  const dim3 grid(static_cast<unsigned>(wb_ceil_div(a->cols, kBlock)), static_cast<unsigned>(slices));
  gelu_backward<<<grid, kBlock, 0, stream>>>(
      static_cast<const float*>(a->dy), static_cast<const float*>(a->x), static_cast<const float*>(a->bias),
      static_cast<float*>(a->dx), partial, a->rows, a->cols, wb_ceil_div(a->rows, slices));
  if (const int status = wb_launch_status(); status != WB_OK) return status;
  sum_slices<<<wb_ceil_div(a->cols, kBlock), kBlock, 0, stream>>>(partial, static_cast<float*>(a->dbias), slices,
                                                                 a->cols);
  return wb_launch_status();
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

// TODO 5: declare the dtypes this variant now supports: WB_F32 | WB_F16 | WB_BF16. The workbench
//         reads this mask to know which dtypes to send here (and the checker to know what to test).
WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32,
                  "exercise 01: scalar bias_gelu, one element per thread (starter: float32 only)",
                  launchers, wb_cuda_status_string)

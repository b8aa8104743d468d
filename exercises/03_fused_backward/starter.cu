// Exercise 03 (a fused, deterministic backward) - starter.
//
// bias_gelu for float32 and float64 whose backward works, but computes dbias with one atomicAdd
// per element: every thread of a column adds into the same address, in whatever order the
// hardware serves them. The sum is then slow where columns are few (the adds to one address are
// serialized) and not reproducible: floating-point addition is not associative, so two runs on the
// same inputs can return different dbias bits. Replace it with a fixed-order reduction.
// exercises/03_fused_backward/README.md has the plan; check your copy with:
//
//     python -m workbench exercise check 3 path/to/your_copy.cu
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64;
constexpr int kBlock = 256;

// Forward (given): one thread per element. wb_acc_t<T> is float for float and double for double.
template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                               int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = wb_from_acc<T>(wb_gelu_tanh(wb_to_acc(x[i]) + wb_to_acc(bias[i % cols])));
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = a->rows * a->cols;
    forward_kernel<T><<<wb_ceil_div(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(l->stream)>>>(
        static_cast<const T*>(a->x), static_cast<const T*>(a->bias), static_cast<T*>(a->y), n, a->cols);
    return wb_launch_status();
  });
}

// TODO 1: replace this kernel. Let a thread own one column c and walk a slice of the rows
//         (blockIdx.y picks the slice): threads of a warp take adjacent columns, so the 32 reads
//         of a row are one contiguous segment. For each row: dx = dy * gelu'(x + bias), store it,
//         and add it to a running sum in a register. At the end write that sum once, to
//         partial[slice * cols + c]. No atomics: every (slice, column) has exactly one writer.
template <typename T>
__global__ void backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ bias,
                                T* __restrict__ dx, wb_acc_t<T>* __restrict__ acc, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t c = i % cols;
  const wb_acc_t<T> g = wb_to_acc(dy[i]) * wb_gelu_tanh_grad(wb_to_acc(x[i]) + wb_to_acc(bias[c]));
  dx[i] = wb_from_acc<T>(g);
  atomicAdd(&acc[c], g);  // the contended, order-dependent sum this exercise removes
}

// TODO 2: turn this into the second pass of the reduction: thread c adds partial[0][c],
//         partial[1][c], ... in slice order, in wb_acc_t<T>, and writes dbias[c] once.
template <typename T>
__global__ void finish_kernel(const wb_acc_t<T>* __restrict__ acc, T* __restrict__ dbias, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < cols) dbias[c] = wb_from_acc<T>(acc[c]);
}

// TODO 3: the workspace now holds one partial sum per (slice, column): slices * cols values of
//         wb_acc_t (8 bytes each for float64, 4 for float32). Choose the number of slices from
//         l->num_sms (the GPU's multiprocessor count): enough threads to keep every SM busy, enough
//         rows per slice that the partial sums stay small next to the tensor. The harness asks
//         for this size before each backward and passes that much memory as a->workspace.
size_t workspace_bytes(int64_t /*rows*/, int64_t cols, int dtype, const WbLaunch* /*l*/) {
  return static_cast<size_t>(cols) * (dtype == WB_FLOAT64 ? sizeof(double) : sizeof(float));
}

// TODO 4: launch your kernels: a grid of (column blocks) x (slices), then the slice-sum kernel.
//         The workspace need not be zeroed any more: every partial is written before it is read.
int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    const auto stream = static_cast<cudaStream_t>(l->stream);
    const int64_t n = a->rows * a->cols;
    A* acc = static_cast<A*>(a->workspace);
    // The workspace arrives uninitialised; atomics need it zeroed first, on the same stream.
    if (const cudaError_t e = cudaMemsetAsync(acc, 0, a->cols * sizeof(A), stream); e != cudaSuccess)
      return static_cast<int>(e);
    backward_kernel<T><<<wb_ceil_div(n, kBlock), kBlock, 0, stream>>>(
        static_cast<const T*>(a->dy), static_cast<const T*>(a->x), static_cast<const T*>(a->bias),
        static_cast<T*>(a->dx), acc, n, a->cols);
    if (const int status = wb_launch_status(); status != WB_OK) return status;
    finish_kernel<T><<<wb_ceil_div(a->cols, kBlock), kBlock, 0, stream>>>(acc, static_cast<T*>(a->dbias), a->cols);
    return wb_launch_status();
  });
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32 | WB_F64,
                  "exercise 03: bias_gelu for float32 and float64 (starter: dbias by atomicAdd)",
                  launchers, wb_cuda_status_string)

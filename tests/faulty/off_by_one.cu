// Planted bug (tests only): correct results, but the last thread also writes one element past the
// end of y. Inside the allocator's rounding this corrupts nothing visible, so only
// compute-sanitizer's memcheck (with PyTorch's caching allocator off) can see it.
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {
__global__ void forward_kernel(const float* x, const float* bias, float* y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i > n) return;  // the bug: should be i >= n
  y[i] = wb_gelu_tanh(x[i % n] + bias[i % cols]);
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  const int64_t n = a->rows * a->cols;
  forward_kernel<<<wb_ceil_div(n + 1, 256), 256, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols);
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted bug: one element past the end", launchers,
                  wb_cuda_status_string)

// Planted cheat (tests only): right at every shape but one. At exactly 8192 x 8192, the shape an
// exercise's speed check times, it computes only the first quarter of the rows and leaves the rest
// as they were, so it looks 4x faster than a kernel at the copy bandwidth. Caught by the check
// at the timed shape (and the physics guard).
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {
__global__ void forward_kernel(const float* x, const float* bias, float* y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t rows = a->rows == 8192 && a->cols == 8192 ? a->rows / 4 : a->rows;  // the cheat
  const int64_t n = rows * a->cols;
  if (n == 0) return WB_OK;
  forward_kernel<<<wb_ceil_div(n, 256), 256, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols);
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted cheat: a quarter of the rows at 8192x8192", launchers,
                  wb_cuda_status_string)

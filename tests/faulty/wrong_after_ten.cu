// Planted bug (tests only): right for its first ten calls, then adds 0.5 to every output, as a
// kernel might that reads a stale workspace or switches to a broken fast path once warmed up.
// Correctness checks (a few calls) pass; caught by checking the last timed call and once more
// after timing.
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {
__global__ void forward_kernel(const float* x, const float* bias, float* y, int64_t n, int64_t cols, float off) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = wb_gelu_tanh(x[i] + bias[i % cols]) + off;
}

int calls = 0;

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t n = a->rows * a->cols;
  if (n == 0) return WB_OK;
  const float off = ++calls > 10 ? 0.5f : 0.0f;  // the bug
  forward_kernel<<<wb_ceil_div(n, 256), 256, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols, off);
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted bug: wrong after its tenth call", launchers,
                  wb_cuda_status_string)

// Planted cheat (tests only): the right kernel, launched on a stream of its own (non-blocking, so
// it never waits for the caller's stream and the caller's never waits for it). Events recorded on
// the caller's stream around the call see nothing, and the call looks free. Caught by timing the
// whole device: back-to-back calls followed by a device-wide synchronisation (work the timer
// cannot see), and by checks that read the output before the private stream has written it.
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {
__global__ void forward_kernel(const float* x, const float* bias, float* y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

cudaStream_t private_stream() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
    return created;
  }();
  return s;
}

int forward(const WbBiasGeluForward* a, const WbLaunch*) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t n = a->rows * a->cols;
  if (n == 0) return WB_OK;
  forward_kernel<<<wb_ceil_div(n, 256), 256, 0, private_stream()>>>(  // the cheat: not launch->stream
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols);
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted cheat: works on a private stream", launchers,
                  wb_cuda_status_string)

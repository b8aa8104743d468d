// Planted cheat (tests only): remembers the (x, bias, y) pointers of its last calls and launches
// nothing when a call repeats them. PyTorch's caching allocator hands the same block back for y,
// so a benchmark that times the same inputs over and over sees y already holding the answer and
// an almost free call. Caught where the timed calls rotate through input sets whose values are
// redrawn between samples, and the last timed call's output is checked.
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {
__global__ void forward_kernel(const float* x, const float* bias, float* y, int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);
}

struct Seen { const void *x, *bias, *y; };
Seen seen[8];
int next_slot = 0;

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  for (const Seen& s : seen)
    if (s.x == a->x && s.bias == a->bias && s.y == a->y) return WB_OK;  // the cheat: "already computed"
  seen[next_slot] = {a->x, a->bias, a->y};
  next_slot = (next_slot + 1) % 8;
  const int64_t n = a->rows * a->cols;
  if (n == 0) return WB_OK;
  forward_kernel<<<wb_ceil_div(n, 256), 256, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), n, a->cols);
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted cheat: replays an answer by pointer", launchers,
                  wb_cuda_status_string)

// Planted cheat (tests only), the host twin of work on a stream of its own: from 512 rows on, the
// forward returns at once and a thread of its own writes y a few milliseconds later, so a call
// looks free to a timer that stops when the call returns. The judge's clock stops only once every
// output holds its values (secretly sampled positions of each): the work is inside the window, or
// the output is caught not holding its values when the runner said it was done.
#include <chrono>
#include <thread>

#include "bias_gelu.h"
#include "gelu.h"
#include "wb_cpu.h"

namespace {
void compute(const float* x, const float* bias, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = wb_gelu_tanh(x[r * cols + c] + bias[c]);
}

int forward(const WbBiasGeluForward* a, const WbLaunch*) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const float* x = static_cast<const float*>(a->x);
  const float* bias = static_cast<const float*>(a->bias);
  float* y = static_cast<float*>(a->y);
  if (a->rows < 512) {
    compute(x, bias, y, a->rows, a->cols);
    return WB_OK;
  }
  std::thread([=, rows = a->rows, cols = a->cols] {  // the cheat: the work after the call returned
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    compute(x, bias, y, rows, cols);
  }).detach();
  return WB_OK;
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
const char* status_string(int) { return "planted"; }
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32, "planted cheat: the work in a thread after the call returns",
                  launchers, status_string)

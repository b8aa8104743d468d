// Planted bug (tests only), the CPU twin of wrong_after_ten.cu: right for its first five calls
// (a benchmark's warm-up call and its check before timing among them), then 0.5 too large
// everywhere. The CPU timer makes at least six more calls (three warm-ups, three samples), so the
// check of the last timed call sees it, whatever the machine's load.
#include "bias_gelu.h"
#include "wb_cpu.h"
#include "gelu.h"

namespace {
int calls = 0;

int forward(const WbBiasGeluForward* a, const WbLaunch*) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const float* x = static_cast<const float*>(a->x);
  const float* bias = static_cast<const float*>(a->bias);
  float* y = static_cast<float*>(a->y);
  const float off = ++calls > 5 ? 0.5f : 0.0f;  // the bug
  for (int64_t r = 0; r < a->rows; ++r)
    for (int64_t c = 0; c < a->cols; ++c) y[r * a->cols + c] = wb_gelu_tanh(x[r * a->cols + c] + bias[c]) + off;
  return WB_OK;
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
const char* status_string(int) { return "planted"; }
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32, "planted bug: wrong after its fifth call", launchers, status_string)

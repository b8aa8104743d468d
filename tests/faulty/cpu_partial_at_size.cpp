// Planted bug (tests only), the CPU twin of partial_at_timed_shape.cu: right on small inputs, but
// from 512 rows on it leaves the last quarter of the rows unwritten (as an int32 index or a tail
// loop that only goes wrong at large sizes would). The check matrix's small shapes pass it; the
// benchmark's check at the timed shape does not.
#include "bias_gelu.h"
#include "wb_cpu.h"
#include "gelu.h"

namespace {
int forward(const WbBiasGeluForward* a, const WbLaunch*) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const float* x = static_cast<const float*>(a->x);
  const float* bias = static_cast<const float*>(a->bias);
  float* y = static_cast<float*>(a->y);
  const int64_t rows = a->rows >= 512 ? a->rows - a->rows / 4 : a->rows;  // the bug
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < a->cols; ++c) y[r * a->cols + c] = wb_gelu_tanh(x[r * a->cols + c] + bias[c]);
  return WB_OK;
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
const char* status_string(int) { return "planted"; }
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32, "planted bug: last quarter of the rows unwritten from 512 rows on",
                  launchers, status_string)

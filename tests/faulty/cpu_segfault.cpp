// Planted fault (tests only): a CPU bias_gelu variant that writes through a null pointer, so the
// process running it dies with SIGSEGV. Isolation must report it and keep the caller alive.
#include "bias_gelu.h"
#include "wb_cpu.h"

namespace {
int forward(const WbBiasGeluForward* a, const WbLaunch*) {
  volatile float* nowhere = nullptr;
  nowhere[a->rows] = 1.0f;
  return WB_OK;
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32, "planted fault: null-pointer write", launchers,
                  wb_cpu_status_string)

// Planted fault (tests only): a bias_gelu variant (for exercise 01's op) whose library never
// finishes loading: a static initializer that waits forever (sleeping, so it costs no CPU). In the
// checker's own process it hung the checker; the checker must load it in a child with a time limit
// and FAIL saying it did not finish (WORKBENCH_LOAD_TIMEOUT_S shortens the limit in the tests).
#include <cstdlib>
#include <unistd.h>

#include "bias_gelu.h"
#include "wb_cuda.h"

namespace {
int forward(const WbBiasGeluForward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

struct AtLoad {
  AtLoad() { for (;;) sleep(1); }
} at_load;
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32 | WB_F16 | WB_BF16, "planted fault: hangs at load", launchers,
                  wb_cuda_status_string)

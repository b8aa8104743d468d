// Planted fault (tests only): a bias_gelu variant (for exercise 01's op) whose library calls
// abort() while it is being loaded (a static initializer). In the checker's own process it killed
// the checker with no report; the checker must load it in a child only and FAIL naming SIGABRT.
#include <cstdlib>

#include "bias_gelu.h"
#include "wb_cuda.h"

namespace {
int forward(const WbBiasGeluForward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

struct AtLoad {
  AtLoad() { std::abort(); }
} at_load;
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32 | WB_F16 | WB_BF16, "planted fault: abort() at load", launchers,
                  wb_cuda_status_string)

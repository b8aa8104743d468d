// Planted fault (tests only): a bias_gelu variant (for exercise 01's op) whose library calls
// exit(0) while it is being loaded - a static initializer, which runs before any kernel is called.
// Loaded in the exercise checker's own process, it ended the checker with exit status 0 and no
// verdict. The checker must load it in a child only and report a FAIL naming the exit status.
#include <cstdlib>

#include "bias_gelu.h"
#include "wb_cuda.h"

namespace {
int forward(const WbBiasGeluForward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

struct AtLoad {
  AtLoad() { std::exit(0); }
} at_load;
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32 | WB_F16 | WB_BF16, "planted fault: exit(0) at load", launchers,
                  wb_cuda_status_string)

// Planted cheat (tests only), class 4 of issue 38: a dead kernel that satisfies the SASS rules. The
// library holds exercise 02's float4 kernel (so its machine code has the 128-bit loads and stores
// the rules ask for) but the forward never launches it: every call runs one float per thread.
// Expected verdict now: the rules judge the kernels that ran; SASS rules FAIL.
#include "ex02_base.cuh"

namespace {

int forward(const WbBiasGeluForward* a, const WbLaunch* l) { return ex02::forward_one_float(a, l); }

// Kept in the library, never launched.
__attribute__((used)) const void* const never_launched = reinterpret_cast<const void*>(&ex02::forward_vec4);

const WbBiasGeluLaunchers launchers = {forward, ex02::backward, ex02::workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted: a float4 kernel never launched; scalar runs",
                  launchers, wb_cuda_status_string)

// Planted fault (tests only): a CUDA bias_gelu variant whose forward stores 2^40 elements past the
// output: an illegal address, which poisons the CUDA context of the process that runs it.
#include "bias_gelu.h"
#include "wb_cuda.h"

namespace {
__global__ void bad_store(float* y) { y[(1ll << 40) + threadIdx.x] = 1.0f; }

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  bad_store<<<1, 32, 0, static_cast<cudaStream_t>(l->stream)>>>(static_cast<float*>(a->y));
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted fault: illegal address", launchers,
                  wb_cuda_status_string)

#include "swiglu.h"
#include "wb_elementwise.cuh"
static const WbElementwiseLaunchers launchers =
    wb_elementwise::scalar_launchers<WB_F32 | WB_F64 | WB_F16 | WB_BF16, WbSwigluForward, WbSwigluBackward>();
WB_EXPORT_VARIANT(swiglu, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "one element per thread, 64-bit indexing; any alignment and size", launchers, wb_cuda_status_string)

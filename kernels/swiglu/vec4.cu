#include "swiglu.h"
#include "wb_elementwise.cuh"
static const WbElementwiseLaunchers launchers =
    wb_elementwise::vector_launchers<WB_F32, WbSwigluForward, WbSwigluBackward>();
WB_EXPORT_VARIANT(swiglu, WB_DEVICE_CUDA, WB_F32, "float4 (16-byte) accesses, flat one-shot grid; n % 4 tail or a "
                  "pointer not 16-byte aligned -> scalar accesses", launchers, wb_cuda_status_string)

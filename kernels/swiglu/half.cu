#include "swiglu.h"
#include "wb_elementwise.cuh"
static const WbElementwiseLaunchers launchers =
    wb_elementwise::vector_launchers<WB_F16 | WB_BF16, WbSwigluForward, WbSwigluBackward>();
WB_EXPORT_VARIANT(swiglu, WB_DEVICE_CUDA, WB_F16 | WB_BF16, "fp16/bf16, 8 per 16-byte access, float math, flat grid; "
                  "n % 8 tail or a pointer not 16-byte aligned -> scalar accesses", launchers, wb_cuda_status_string)

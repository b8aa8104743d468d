// half: vec4 for fp16/bf16, 8 per access, float math. Predicted: the copy ceiling, ~0.09 ms at 8192^2.
#include "l2_normalize.h"
#include "wb_row.cuh"
static const WbRowLaunchers launchers =
    wb_row::vector_launchers<WB_F16 | WB_BF16, WbL2NormalizeForward, WbL2NormalizeBackward>();
WB_EXPORT_VARIANT(l2_normalize, WB_DEVICE_CUDA, WB_F16 | WB_BF16, "fp16/bf16, 8 per 16-byte access, float math, "
                  "the row in registers up to 32768; longer rows, n % 8 or an unaligned view -> re-read rows",
                  launchers, wb_cuda_status_string)

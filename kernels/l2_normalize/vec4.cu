// vec4: float4, the row in registers (read once). Predicted: the copy ceiling, ~0.18 ms at 8192^2 (H100).
#include "l2_normalize.h"
#include "wb_row.cuh"
static const WbRowLaunchers launchers =
    wb_row::vector_launchers<WB_F32, WbL2NormalizeForward, WbL2NormalizeBackward>();
WB_EXPORT_VARIANT(l2_normalize, WB_DEVICE_CUDA, WB_F32, "float4 accesses, the row in registers up to 16384; longer "
                  "rows, n % 4 or an unaligned view -> re-read rows", launchers, wb_cuda_status_string)

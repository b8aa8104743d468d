// half: vec4's layout for fp16/bf16: 8 values per 16-byte access, float math, rounded once on the
// store. Predicted: the forward at the copy ceiling (~0.09 ms for bf16 at 8192 x 8192 on the H100).
#include "softmax.h"
#include "wb_row.cuh"
static const WbRowLaunchers launchers =
    wb_row::vector_launchers<WB_F16 | WB_BF16, WbSoftmaxForward, WbSoftmaxBackward>();
WB_EXPORT_VARIANT(softmax, WB_DEVICE_CUDA, WB_F16 | WB_BF16, "fp16/bf16, 8 per 16-byte access, float math, the row "
                  "in registers up to 32768 values; longer rows, n % 8 or an unaligned view -> re-read rows",
                  launchers, wb_cuda_status_string)

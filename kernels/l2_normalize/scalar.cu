// scalar: the streamed route, one element per access, every dtype. Predicted: softmax/scalar's times.
#include "l2_normalize.h"
#include "wb_row.cuh"
static const WbRowLaunchers launchers =
    wb_row::scalar_launchers<WB_F32 | WB_F64 | WB_F16 | WB_BF16, WbL2NormalizeForward, WbL2NormalizeBackward>();
WB_EXPORT_VARIANT(l2_normalize, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16, "a block of 256 per row, one "
                  "element per access, the row read again for the write", launchers, wb_cuda_status_string)

// scalar: the teaching baseline. A block of 256 threads per row, one element per access, the row
// read three times (the max, the sum, the write; a backward reads x and dy three times), the
// second and third reads mostly from L2 for rows of a few KB. Every dtype, float64 included (a
// true float64 gradcheck). Predicted: ~60-80% of the copy rate at 8192 x 8192 (rmsnorm's scalar
// rung, one element per access and two reads of x, ran at 86% in bf16: its second read hit in L2;
// here a third read and twice the exp per element).
#include "softmax.h"
#include "wb_row.cuh"
static const WbRowLaunchers launchers =
    wb_row::scalar_launchers<WB_F32 | WB_F64 | WB_F16 | WB_BF16, WbSoftmaxForward, WbSoftmaxBackward>();
WB_EXPORT_VARIANT(softmax, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16, "a block of 256 per row, one element "
                  "per access, the row read again for each reduction and the write; any alignment and size",
                  launchers, wb_cuda_status_string)

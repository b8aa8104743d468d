// vec4: what it adds over scalar: float4 (16-byte) accesses, and the row read once, into registers
// (a warp per row up to 512 floats, a block per row up to 16384): the max, the sum and the write run
// on the registers. Predicted: the forward at the copy ceiling (~0.17 ms at 8192 x 8192 on the
// H100), fwd+bwd >= 1.0x torch.softmax. Rows past 16384 floats, n % 4 != 0 or an unaligned view:
// the streamed route.
#include "softmax.h"
#include "wb_row.cuh"
static const WbRowLaunchers launchers = wb_row::vector_launchers<WB_F32, WbSoftmaxForward, WbSoftmaxBackward>();
WB_EXPORT_VARIANT(softmax, WB_DEVICE_CUDA, WB_F32, "float4 accesses, the row in registers (a warp per row up to "
                  "512, a block up to 16384); longer rows, n % 4 or a pointer not 16-byte aligned -> re-read rows",
                  launchers, wb_cuda_status_string)

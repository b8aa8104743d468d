// half: what it adds over vec4: fp16 and bf16 from one template, still 16 bytes per access, which
// is now 8 elements per thread per vector. Storage is half the bytes of float, so on this
// memory-bound op the time halves; the multiply is in float (convert after the load, round once
// before the store), so the only error is the final rounding to 16 bits.
// Route: the last n % 8 elements, or every element of a view not 16-byte aligned, take scalar accesses.
// Predicted: half vec4's time, at the copy bandwidth.
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd bf16 0.522 ms, 1.57x scalar (102.8%), 1.00x torch.compile; bwd bf16 0.883 ms, 1.21x scalar
// (101.4%), 1.00x torch.compile.
#include "elementwise_mul.h"
#include "wb_elementwise.cuh"

static const WbElementwiseLaunchers launchers =
    wb_elementwise::vector_launchers<WB_F16 | WB_BF16, WbElementwiseMulForwardStep, WbElementwiseMulBackwardStep>();
WB_EXPORT_VARIANT(elementwise_mul, WB_DEVICE_CUDA, WB_F16 | WB_BF16, "fp16/bf16, 8 elements (16 bytes) per access, "
                  "float arithmetic, flat one-shot grid; n % 8 tail or a pointer not 16-byte aligned -> same kernel "
                  "with scalar accesses", launchers, wb_cuda_status_string)

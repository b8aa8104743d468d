// vec4: what it adds over scalar: each thread moves 16 bytes per access (a float4 of a, of b and
// of y) in a flat one-shot grid (kernels/common/wb_elementwise.cuh), so a warp issues 4x fewer memory instructions
// than scalar's for the same bytes. The op moves 12 bytes per element for one multiply: only the
// memory stream matters, and this is what it takes to run at the copy bandwidth.
// Backward: da and db in the same pass over dy, a and b.
// Route: the last n % 4 elements, or every element of a view not 16-byte aligned, take scalar accesses.
// Predicted: the forward at the copy bandwidth (the probe: 102% for this pattern), a few % over
// scalar; the backward, where scalar already streams at 102%, no gain.
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd 1.048 ms, 1.10x scalar (102.5%), 0.99x torch.compile; bwd 1.768 ms, 1.00x scalar (101.2%),
// 1.00x torch.compile.
#include "elementwise_mul.h"
#include "wb_elementwise.cuh"

static const WbElementwiseLaunchers launchers =
    wb_elementwise::vector_launchers<WB_F32, WbElementwiseMulForwardStep, WbElementwiseMulBackwardStep>();
WB_EXPORT_VARIANT(elementwise_mul, WB_DEVICE_CUDA, WB_F32, "float4 (16-byte) loads and stores, flat one-shot grid; "
                  "n % 4 tail or a pointer not 16-byte aligned -> same kernel with scalar accesses", launchers,
                  wb_cuda_status_string)

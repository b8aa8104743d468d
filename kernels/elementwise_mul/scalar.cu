// scalar: the teaching baseline. One thread computes one element with plain loads and stores;
// templated over float, double, half and bfloat16, computing in float for the 16-bit types (double
// for double, so a true float64 gradcheck runs on the GPU). The backward is one thread per element
// too, writing both gradients: no reduction anywhere in this op.
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd fp32 1.152 ms (93%), bf16 0.822 ms (65%); bwd fp32 1.760 ms (102%), bf16 1.066 ms (84%).
#include "elementwise_mul.h"
#include "wb_elementwise.cuh"

static const WbElementwiseLaunchers launchers = wb_elementwise::scalar_launchers<
    WB_F32 | WB_F64 | WB_F16 | WB_BF16, WbElementwiseMulForwardStep, WbElementwiseMulBackwardStep>();
WB_EXPORT_VARIANT(elementwise_mul, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "one element per thread, 64-bit indexing; any alignment and size", launchers, wb_cuda_status_string)

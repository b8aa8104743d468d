// vec4: what it adds over scalar: each thread moves 16 bytes per access (a float4's worth of a,
// of b and of c: WbVec<float, 4>, LDG.E.128 / STG.E.128), so a warp issues 4x fewer memory
// instructions for the same bytes, and the grid is flat and one-shot (one vector per thread, a
// block per 1024 floats, no loop): many short blocks keep every SM's loads in flight, which is what
// streaming at the copy rate takes. float32 only.
// Route: the last n % 4 elements go through the same kernel with V = 1 (one float per thread); a
// pointer that is not 16-byte aligned (a view with an offset, a NumPy slice) sends the whole call there.
// The kernel and the route are the elementwise family's (kernels/common/wb_elementwise.cuh), the
// same accesses this file's own kernels made.
// Backward: dc read once per vector, written to da and db in the same pass.
// Predicted: at the copy bandwidth for three arrays (12 bytes per element: a and b read, c
// written; elementwise_mul's vec4, the same stream, ran at 102% on the H100), a few % over scalar.
// Measured (results/gpu/1e52cd0, H100, float32): 2^26 0.259 ms, 103% of the copy bandwidth, 1.10x
// scalar, 1.01x eager; Nsight Compute (profile_vector_add.log): DRAM 91% of peak against scalar's 83%,
// a quarter of the load requests. Through the NumPy front end: 101% (results/gpu/36f9438/ndarray).
#include "vector_add.h"
#include "wb_elementwise.cuh"

static const WbElementwiseLaunchers launchers =
    wb_elementwise::vector_launchers<WB_F32, WbVectorAddForwardStep, WbVectorAddBackwardStep>();
WB_EXPORT_VARIANT(vector_add, WB_DEVICE_CUDA, WB_F32, "float4 (16-byte) loads and stores, flat one-shot grid; "
                  "n % 4 tail or a pointer not 16-byte aligned -> one element per thread", launchers,
                  wb_cuda_status_string)

// vec4: what it adds over scalar: each thread moves 16 bytes per access (a float4 of x, of y, and
// of bias, whose index is found once per 4 elements), so a warp issues 4x fewer memory
// instructions for the same bytes (kernels/common/wb_row_tiles.cuh). The op is memory-bound (8
// bytes per element against a dozen flops), so this is what it takes to approach the copy
// bandwidth.
// Backward fuses dx with the dbias reduction: each thread owns 4 columns and sums them over a
// slice of rows in float registers; per-slice partials are added in a fixed order (deterministic).
// Route: rows whose length is not a multiple of 4, or views whose data pointers are not 16-byte
// aligned (a storage offset), run the same kernels with scalar accesses.
// Predicted: the forward at the copy bandwidth, ~1.3x scalar. The shared forward became a flat grid
// with plain loads after scripts/probe_bandwidth.cu put the row tiles at 96.9% (prediction +3%).
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd 0.708 ms, 1.33x scalar (101%; 97.4% before the flat forward), 1.00x torch.compile;
// bwd 1.115 ms, 1.19x scalar (96%), 1.03x torch.compile.
#include "bias_gelu.h"
#include "gelu.h"
#include "wb_row_tiles.cuh"

namespace {

constexpr int kWidth = 4;  // floats per 16-byte access

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<WB_F32>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::forward<T, kWidth>(static_cast<const T*>(a->x), static_cast<const T*>(a->bias),
                                        static_cast<T*>(a->y), a->rows, a->cols, WbGeluOfSum{}, l);
  });
}

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<WB_F32>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::backward<T, kWidth>(static_cast<const T*>(a->dy), static_cast<const T*>(a->x),
                                         static_cast<const T*>(a->bias), static_cast<T*>(a->dx),
                                         static_cast<T*>(a->dbias), a->workspace, a->rows, a->cols,
                                         WbGeluOfSum{}, l);
  });
}

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch* l) {
  size_t bytes = 0;
  wb_dispatch_dtype<WB_F32>(dtype, [&](auto tag) {
    bytes = wb_row_tiles::workspace_bytes<typename decltype(tag)::type, kWidth, WbGeluOfSum>(rows, cols, l);
    return WB_OK;
  });
  return bytes;
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32,
                  "float4 (16-byte) loads and stores, thread per 4 columns, fused dx+dbias backward; "
                  "cols % 4 != 0 or a pointer not 16-byte aligned -> same kernels with scalar accesses",
                  launchers, wb_cuda_status_string)

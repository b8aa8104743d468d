// vec4: what it adds over scalar: each thread moves 16 bytes per access (a float4 of x, of y, and
// of bias, whose index is found once per 4 elements; kernels/common/wb_row_tiles.cuh), so a warp
// issues 4x fewer memory instructions. The backward becomes one fused pass: each thread owns 4
// columns over a slice of the rows, writes dx and sums the dbias terms in float registers as dy
// and x stream by once (scalar reads them twice); per-slice partials are added in a fixed order
// (deterministic).
// Route: rows whose length is not a multiple of 4, or views whose data pointers are not 16-byte
// aligned (a storage offset), run the same kernels with scalar accesses.
// Predicted: the forward at the copy bandwidth like bias_gelu's vec4, the backward >= 85% of its
// byte floor (one pass where scalar makes two).
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd 0.708 ms, 1.27x scalar (101.1%), 1.00x torch.compile; bwd 1.119 ms, 4.0x scalar (96.0%),
// 0.84x torch.compile, whose forward saves a 1-byte mask so that its backward reads 9 bytes per
// element to this one's 12 (the op's backward takes x).
#include "relu.h"
#include "scale_bias_relu.h"
#include "wb_row_tiles.cuh"

namespace {

constexpr int kWidth = 4;  // floats per 16-byte access

using F = WbScaleBiasRelu<float>;

int forward(const WbScaleBiasReluForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<WB_F32>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::forward<T, kWidth>(static_cast<const T*>(p->x), static_cast<const T*>(p->bias),
                                        static_cast<T*>(p->y), p->rows, p->cols, F{static_cast<float>(p->scale)}, l);
  });
}

int backward(const WbScaleBiasReluBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<WB_F32>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::backward<T, kWidth>(static_cast<const T*>(p->dy), static_cast<const T*>(p->x),
                                         static_cast<const T*>(p->bias), static_cast<T*>(p->dx),
                                         static_cast<T*>(p->dbias), p->workspace, p->rows, p->cols,
                                         F{static_cast<float>(p->scale)}, l);
  });
}

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch* l) {
  return dtype == WB_FLOAT32 ? wb_row_tiles::workspace_bytes<float, kWidth, F>(rows, cols, l) : 0;
}

const WbScaleBiasReluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(scale_bias_relu, WB_DEVICE_CUDA, WB_F32,
                  "float4 (16-byte) loads and stores, thread per 4 columns, fused dx+dbias backward; "
                  "cols % 4 != 0 or a pointer not 16-byte aligned -> same kernels with scalar accesses",
                  launchers, wb_cuda_status_string)

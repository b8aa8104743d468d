// half: what it adds over vec4: fp16 and bf16 from one template, still 16 bytes per access, which
// is now 8 elements per thread. Storage is half the bytes of float, so on this memory-bound op the
// time halves; arithmetic stays in float (convert after the load, round once before the store),
// and the dbias partial sums are float as well.
// Route: rows whose length is not a multiple of 8, or views whose data pointers are not 16-byte
// aligned, run the same kernels with scalar (2-byte) accesses.
// Predicted: half vec4's time, at the copy bandwidth.
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd bf16 0.354 ms, 2.25x scalar (101.1%), 1.00x torch.compile; bwd bf16 0.571 ms, 6.95x scalar
// (94.0%), 0.89x torch.compile (its 1-byte mask, as in vec4.cu).
#include "relu.h"
#include "scale_bias_relu.h"
#include "wb_row_tiles.cuh"

namespace {

constexpr int kWidth = 8;  // 16-bit elements per 16-byte access

constexpr unsigned kDtypes = WB_F16 | WB_BF16;
using F = WbScaleBiasRelu<float>;

int forward(const WbScaleBiasReluForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::forward<T, kWidth>(static_cast<const T*>(p->x), static_cast<const T*>(p->bias),
                                        static_cast<T*>(p->y), p->rows, p->cols, F{static_cast<float>(p->scale)}, l);
  });
}

int backward(const WbScaleBiasReluBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::backward<T, kWidth>(static_cast<const T*>(p->dy), static_cast<const T*>(p->x),
                                         static_cast<const T*>(p->bias), static_cast<T*>(p->dx),
                                         static_cast<T*>(p->dbias), p->workspace, p->rows, p->cols,
                                         F{static_cast<float>(p->scale)}, l);
  });
}

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch* l) {
  size_t bytes = 0;
  wb_dispatch_dtype<kDtypes>(dtype, [&](auto tag) {
    bytes = wb_row_tiles::workspace_bytes<typename decltype(tag)::type, kWidth, F>(rows, cols, l);
    return WB_OK;
  });
  return bytes;
}

const WbScaleBiasReluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(scale_bias_relu, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "fp16/bf16, 8 elements (16 bytes) per access, float arithmetic, fused dx+dbias backward; "
                  "cols % 8 != 0 or a pointer not 16-byte aligned -> same kernels with scalar accesses",
                  launchers, wb_cuda_status_string)

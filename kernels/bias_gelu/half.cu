// half: what it adds over vec4: fp16 and bf16 from one template, still 16 bytes per access, which
// is now 8 elements per thread. Storage is half the bytes of float, so on a memory-bound op the
// time halves; arithmetic stays in float (convert after the load, round once before the store),
// so the only error is the final rounding to 16 bits. dbias partial sums are float as well.
// Route: rows whose length is not a multiple of 8, or views whose data pointers are not 16-byte
// aligned, run the same kernels with scalar (2-byte) accesses.
// Predicted: half vec4's time (half the bytes), at the copy bandwidth.
// Measured (results/gpu/3e17357, H100, 16384 x 16384; in parentheses the % of the copy bandwidth,
// or of the backward's byte floor):
// fwd bf16 0.353 ms, 2.40x scalar (101.5%), 1.07x torch.compile (fp16 1.03x);
// bwd bf16 0.567 ms, 1.63x scalar (94.7%), 1.09x torch.compile.
#include "bias_gelu.h"
#include "gelu.h"
#include "wb_row_tiles.cuh"

namespace {

constexpr int kWidth = 8;  // 16-bit elements per 16-byte access

constexpr unsigned kDtypes = WB_F16 | WB_BF16;

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::forward<T, kWidth>(static_cast<const T*>(a->x), static_cast<const T*>(a->bias),
                                        static_cast<T*>(a->y), a->rows, a->cols, WbGeluOfSum{}, l);
  });
}

int backward(const WbBiasGeluBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return wb_row_tiles::backward<T, kWidth>(static_cast<const T*>(a->dy), static_cast<const T*>(a->x),
                                         static_cast<const T*>(a->bias), static_cast<T*>(a->dx),
                                         static_cast<T*>(a->dbias), a->workspace, a->rows, a->cols,
                                         WbGeluOfSum{}, l);
  });
}

size_t workspace_bytes(int64_t rows, int64_t cols, int dtype, const WbLaunch* l) {
  size_t bytes = 0;
  wb_dispatch_dtype<kDtypes>(dtype, [&](auto tag) {
    bytes = wb_row_tiles::workspace_bytes<typename decltype(tag)::type, kWidth, WbGeluOfSum>(rows, cols, l);
    return WB_OK;
  });
  return bytes;
}

const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F16 | WB_BF16,
                  "fp16/bf16, 8 elements (16 bytes) per access, float arithmetic, fused dx+dbias backward; "
                  "cols % 8 != 0 or a pointer not 16-byte aligned -> same kernels with scalar accesses",
                  launchers, wb_cuda_status_string)

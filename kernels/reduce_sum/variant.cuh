// The launcher table a CUDA reduce_sum variant exports, built from its forward alone: dtype
// dispatch, the workspace query and the shared broadcast backward (broadcast.cuh) are the same for
// every rung. A variant supplies
//   struct Impl {
//     static constexpr bool kVectorBackward;  // 16-byte stores in the backward, else one value each
//     template <typename T> static int forward(const T* x, T* y, void* workspace, int64_t rows,
//                                              int64_t n, cudaStream_t stream);
//     template <typename T> static size_t workspace_bytes(int64_t rows, int64_t n);
//   };
// and exports reduce_sum::Variant<Impl>::launchers, for all four dtypes.
#pragma once

#include "broadcast.cuh"

namespace reduce_sum {

template <typename Impl>
struct Variant {
  static constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;

  static int forward(const WbReduceSumForward* a, const WbLaunch* l) {
    return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return Impl::template forward<T>(static_cast<const T*>(a->x), static_cast<T*>(a->y), a->workspace, a->rows,
                                       a->n, static_cast<cudaStream_t>(l->stream));
    });
  }
  static int backward(const WbReduceSumBackward* a, const WbLaunch* l) {
    return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return broadcast<T, Impl::kVectorBackward ? static_cast<int>(16 / sizeof(T)) : 1>(a, l);
    });
  }
  static size_t workspace_bytes(int64_t rows, int64_t n, int dtype, const WbLaunch*) {
    size_t bytes = 0;
    wb_dispatch_dtype<kDtypes>(dtype, [&](auto tag) {
      bytes = Impl::template workspace_bytes<typename decltype(tag)::type>(rows, n);
      return WB_OK;
    });
    return bytes;
  }
  static constexpr WbReduceSumLaunchers launchers = {forward, backward, workspace_bytes};
};

}  // namespace reduce_sum

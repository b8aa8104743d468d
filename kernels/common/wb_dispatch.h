// What the CPU (wb_cpu.h) and CUDA (wb_cuda.h) variants share: the compute type of a storage type,
// the dtype dispatch and the words for a WbStatus. No torch, no CUDA.
#pragma once

#include "wb_types.h"
#include "wb_variant.h"

// Compute type for a storage type: float for the 16-bit types (and float), double for double.
template <typename T> struct WbAcc { using type = float; };
template <> struct WbAcc<double> { using type = double; };
template <typename T> using wb_acc_t = typename WbAcc<T>::type;

template <typename T> struct WbType { using type = T; };

// Calls fn(WbType<T>{}) with the storage type T named by a WbDtype, for the dtypes in MASK only;
// any other dtype returns WB_ERR_DTYPE, so a variant never reinterprets memory it was not written
// for. (A tag argument rather than a templated lambda keeps this C++17.)
template <unsigned MASK, typename Fn>
inline int wb_dispatch_dtype(int dtype, Fn&& fn) {
  switch (dtype) {
    case WB_FLOAT32: if constexpr ((MASK & WB_F32) != 0) return fn(WbType<float>{}); break;
    case WB_FLOAT64: if constexpr ((MASK & WB_F64) != 0) return fn(WbType<double>{}); break;
    case WB_FLOAT16: if constexpr ((MASK & WB_F16) != 0) return fn(WbType<wb_half_t>{}); break;
    case WB_BFLOAT16: if constexpr ((MASK & WB_BF16) != 0) return fn(WbType<wb_bf16_t>{}); break;
  }
  return WB_ERR_DTYPE;
}

// The words for a WbStatus; NULL for any other code (a cudaError_t: only wb_cuda.h can name those).
inline const char* wb_status_words(int status) {
  switch (status) {
    case WB_OK: return "no error";
    case WB_ERR_DTYPE: return "dtype not supported by this variant";
    case WB_ERR_ARGUMENT: return "invalid argument";
    default: return nullptr;
  }
}

// Device-side helpers shared by the CUDA variants: storage <-> compute type conversion, the
// status string every CUDA variant exports, and grid sizing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "wb_variant.h"

// Compute type for a storage type: float for the 16-bit types (and float), double for double.
template <typename T> struct WbAcc { using type = float; };
template <> struct WbAcc<double> { using type = double; };
template <typename T> using wb_acc_t = typename WbAcc<T>::type;

__device__ __forceinline__ float wb_to_acc(float v) { return v; }
__device__ __forceinline__ double wb_to_acc(double v) { return v; }
__device__ __forceinline__ float wb_to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float wb_to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T wb_from_acc(wb_acc_t<T> v);
template <> __device__ __forceinline__ float wb_from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double wb_from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ __half wb_from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 wb_from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

static const char* wb_cuda_status_string(int status) {
  switch (status) {
    case WB_OK: return "no error";
    case WB_ERR_DTYPE: return "dtype not supported by this variant";
    case WB_ERR_ARGUMENT: return "invalid argument";
    default: return cudaGetErrorString(static_cast<cudaError_t>(status));
  }
}

// The status of the launch just made: a launch-configuration error, or WB_OK.
static inline int wb_launch_status() { return static_cast<int>(cudaGetLastError()); }

static inline int64_t wb_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T> struct WbType { using type = T; };

// Calls fn(WbType<T>{}) with the storage type T named by a WbDtype, for the dtypes in MASK only;
// any other dtype returns WB_ERR_DTYPE, so a variant never reinterprets memory it was not written
// for. (A tag argument rather than a templated lambda keeps this C++17.)
template <unsigned MASK, typename Fn>
static int wb_dispatch_dtype(int dtype, Fn&& fn) {
  switch (dtype) {
    case WB_FLOAT32: if constexpr ((MASK & WB_F32) != 0) return fn(WbType<float>{}); break;
    case WB_FLOAT64: if constexpr ((MASK & WB_F64) != 0) return fn(WbType<double>{}); break;
    case WB_FLOAT16: if constexpr ((MASK & WB_F16) != 0) return fn(WbType<__half>{}); break;
    case WB_BFLOAT16: if constexpr ((MASK & WB_BF16) != 0) return fn(WbType<__nv_bfloat16>{}); break;
  }
  return WB_ERR_DTYPE;
}

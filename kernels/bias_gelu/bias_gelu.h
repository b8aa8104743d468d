// bias_gelu: y = GELU_tanh(x + bias), bias broadcast over the last dimension.
//
// x is viewed as a contiguous [rows, cols] matrix (cols = the last dimension). Backward:
//   dx    = dy * GELU_tanh'(x + bias)
//   dbias = sum of dx over the rows, accumulated in float (double for float64)
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/bias_gelu.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbBiasGeluForward {
  int dtype;          // WbDtype of x, bias and y
  int64_t rows, cols;
  const void* x;      // [rows, cols], contiguous
  const void* bias;   // [cols]
  void* y;            // [rows, cols], contiguous
} WbBiasGeluForward;

typedef struct WbBiasGeluBackward {
  int dtype;
  int64_t rows, cols;
  const void* dy;     // [rows, cols], contiguous
  const void* x;      // [rows, cols], contiguous
  const void* bias;   // [cols]
  void* dx;           // [rows, cols], contiguous
  void* dbias;        // [cols], written in the input dtype
  void* workspace;    // backward_workspace_bytes(...) bytes, aligned for any type, uninitialised
} WbBiasGeluBackward;

typedef struct WbBiasGeluLaunchers {
  int (*forward)(const WbBiasGeluForward* args, const WbLaunch* launch);
  int (*backward)(const WbBiasGeluBackward* args, const WbLaunch* launch);
  // Scratch the backward needs (for per-block partial sums of dbias); 0 for none.
  size_t (*backward_workspace_bytes)(int64_t rows, int64_t cols, int dtype, const WbLaunch* launch);
} WbBiasGeluLaunchers;

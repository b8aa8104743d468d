// scale_bias_relu: y = relu(x * scale + bias), bias broadcast over the last dimension and `scale`
// a float attribute (not differentiable).
//
// x is viewed as a contiguous [rows, cols] matrix (cols = the last dimension). Backward, with
// m = (x * scale + bias > 0):
//   dx    = dy * m * scale
//   dbias = sum over the rows of dy * m, accumulated in float (double for float64)
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/scale_bias_relu.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbScaleBiasReluForward {
  int dtype;          // WbDtype of x, bias and y
  int64_t rows, cols;
  double scale;
  const void* x;      // [rows, cols], contiguous
  const void* bias;   // [cols]
  void* y;            // [rows, cols], contiguous
} WbScaleBiasReluForward;

typedef struct WbScaleBiasReluBackward {
  int dtype;
  int64_t rows, cols;
  double scale;
  const void* dy;     // [rows, cols], contiguous
  const void* x;      // [rows, cols], contiguous
  const void* bias;   // [cols]
  void* dx;           // [rows, cols], contiguous
  void* dbias;        // [cols], written in the input dtype
  void* workspace;    // backward_workspace_bytes(...) bytes, uninitialised
} WbScaleBiasReluBackward;

typedef struct WbScaleBiasReluLaunchers {
  int (*forward)(const WbScaleBiasReluForward* args, const WbLaunch* launch);
  int (*backward)(const WbScaleBiasReluBackward* args, const WbLaunch* launch);  // NULL: forward only
  // Scratch the backward needs (per-block partial sums of dbias); NULL or 0 for none.
  size_t (*backward_workspace_bytes)(int64_t rows, int64_t cols, int dtype, const WbLaunch* launch);
} WbScaleBiasReluLaunchers;

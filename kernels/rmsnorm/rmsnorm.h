// rmsnorm: y = x / sqrt(mean(x^2 over the last dimension) + eps) * weight, weight of shape [h].
//
// x is viewed as a contiguous [rows, h] matrix. With r = rstd = 1 / sqrt(mean(x^2) + eps) per row
// and g = dy * weight, the backward is
//   dx      = r * g - x * r^3 * mean(g * x)      (per row: two row sums, x^2 and g * x)
//   dweight = sum over the rows of dy * x * r     (a reduction over every row)
// The forward returns y alone and the backward recomputes r from x: the backward reads the whole
// row of x anyway, so r costs one more sum in the same pass and no bytes (see the CUDA variants'
// comments for the measurement). Accumulation in float (double for float64). Rows are never empty
// (rows, h >= 1: kernels/common/wb_row.h).
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/rmsnorm.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbRmsnormForward {
  int dtype;            // WbDtype of x, weight and y
  int64_t rows, h;
  const void* x;        // [rows, h], contiguous
  const void* weight;   // [h]
  void* y;              // [rows, h], contiguous
  double eps;           // >= 0, finite (checked by the front end)
} WbRmsnormForward;

typedef struct WbRmsnormBackward {
  int dtype;
  int64_t rows, h;
  const void* dy;       // [rows, h], contiguous
  const void* x;        // [rows, h], contiguous
  const void* weight;   // [h]
  void* dx;             // [rows, h], contiguous
  void* dweight;        // [h], written in the input dtype
  double eps;
  void* workspace;      // backward_workspace_bytes(...) bytes, aligned for any type, uninitialised
} WbRmsnormBackward;

typedef struct WbRmsnormLaunchers {
  int (*forward)(const WbRmsnormForward* args, const WbLaunch* launch);
  int (*backward)(const WbRmsnormBackward* args, const WbLaunch* launch);
  // Scratch the backward needs (per-block partial sums of dweight, per-row rstd); 0 for none.
  size_t (*backward_workspace_bytes)(int64_t rows, int64_t h, int dtype, const WbLaunch* launch);
} WbRmsnormLaunchers;

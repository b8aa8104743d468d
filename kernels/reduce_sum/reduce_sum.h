// reduce_sum: y = x summed over its last dimension.
//
// x is viewed as a contiguous [rows, n] matrix (n = the last dimension) and y as [rows]: a 1-D x
// is one row, and y its 0-dim total. Sums accumulate in float for float32/float16/bfloat16 and in
// double for float64; y is written in x's dtype. Backward: dx[r, j] = dy[r] (dy broadcast over the
// last dimension). Rows are never empty (rows, n >= 1: the promise is kernels/common/wb_row.h's);
// an empty row sums to zero without a launch.
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/reduce_sum.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbReduceSumForward {
  int dtype;          // WbDtype of x and y
  int64_t rows, n;
  const void* x;      // [rows, n], contiguous; may start at any element (a view's storage offset)
  void* y;            // [rows]
  void* workspace;    // forward_workspace_bytes(...) bytes, aligned for any type, uninitialised
} WbReduceSumForward;

typedef struct WbReduceSumBackward {
  int dtype;
  int64_t rows, n;
  const void* dy;     // [rows]
  void* dx;           // [rows, n], contiguous
} WbReduceSumBackward;

typedef struct WbReduceSumLaunchers {
  int (*forward)(const WbReduceSumForward* args, const WbLaunch* launch);
  int (*backward)(const WbReduceSumBackward* args, const WbLaunch* launch);  // NULL: forward only
  // Scratch the forward needs for partial sums (a row split over several blocks); 0 for none.
  size_t (*forward_workspace_bytes)(int64_t rows, int64_t n, int dtype, const WbLaunch* launch);
} WbReduceSumLaunchers;

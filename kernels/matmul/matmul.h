// matmul: y = a @ b for a [m, k] and b [k, n]; y is [m, n]. All three row-major and contiguous.
//
// Backward, for dy [m, n]:
//   da = dy @ b^T   [m, k]
//   db = a^T @ dy   [k, n]
// computed by the same variant's GEMM kernels as its forward. Decision: every GEMM kernel computes
// C = op(A) @ op(B) with op = N (as stored) or T (transposed) per operand, chosen by template flags,
// reading A and B through leading dimensions (lda, ldb; C is contiguous, ldc = its columns). The
// backward then reads dy, a and b where they lie, with no transposed copy and no workspace:
//   forward   y = a  @ b    N/N: A = a  [m, k], lda = k;  B = b  [k, n], ldb = n
//   backward da = dy @ b^T  N/T: A = dy [m, n], lda = n;  B = b  [k, n] read as op(B) [n, k], ldb = n
//            db = a^T @ dy  T/N: A = a  [m, k] read as op(A) [k, m], lda = k;  B = dy [m, n], ldb = n
// Every variant's launcher handles these three cases for any m, k, n >= 1 (tails predicated, or a
// routed path its file states). Products accumulate in float (double for float64), each output as
// one sum over k in a fixed order: deterministic, no atomics, no split-k.
// The front end never calls a launcher with m, k or n = 0: an empty input gives empty outputs, or
// zeros (a sum over nothing, k = 0), without a launch; a launcher refuses a zero dim (WB_ERR_ARGUMENT).
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/matmul.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbMatmulForward {
  int dtype;            // WbDtype of a, b and y
  int64_t m, k, n;
  const void* a;        // [m, k], row-major, contiguous
  const void* b;        // [k, n], row-major, contiguous
  void* y;              // [m, n], row-major, contiguous
} WbMatmulForward;

typedef struct WbMatmulBackward {
  int dtype;
  int64_t m, k, n;
  const void* dy;       // [m, n], contiguous
  const void* a;        // [m, k], contiguous
  const void* b;        // [k, n], contiguous
  void* da;             // [m, k] = dy @ b^T
  void* db;             // [k, n] = a^T @ dy
  void* workspace;      // backward_workspace_bytes(...) bytes, aligned for any type, uninitialised
} WbMatmulBackward;

typedef struct WbMatmulLaunchers {
  int (*forward)(const WbMatmulForward* args, const WbLaunch* launch);
  int (*backward)(const WbMatmulBackward* args, const WbLaunch* launch);
  // Scratch the backward needs; NULL (none) for every variant in the tree, whose two GEMMs write
  // da and db directly. Kept for a variant that stages partial sums (a fixed-order split-k).
  size_t (*backward_workspace_bytes)(int64_t m, int64_t k, int64_t n, int dtype, const WbLaunch* launch);
} WbMatmulLaunchers;

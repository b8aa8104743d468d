// elementwise_mul: y = a * b, for a and b of the same shape (any shape: the kernels see n elements).
//
// Backward: da = dy * b and db = dy * a, both element-wise (no reduction).
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/elementwise_mul.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbElementwiseMulForward {
  int dtype;          // WbDtype of a, b and y
  int64_t n;          // elements in each tensor
  const void* a;      // [n], contiguous
  const void* b;      // [n]
  void* y;            // [n]
} WbElementwiseMulForward;

typedef struct WbElementwiseMulBackward {
  int dtype;
  int64_t n;
  const void* dy;     // [n]
  const void* a;      // [n]
  const void* b;      // [n]
  void* da;           // [n] = dy * b
  void* db;           // [n] = dy * a
} WbElementwiseMulBackward;

typedef struct WbElementwiseMulLaunchers {
  int (*forward)(const WbElementwiseMulForward* args, const WbLaunch* launch);
  int (*backward)(const WbElementwiseMulBackward* args, const WbLaunch* launch);  // NULL: forward only
} WbElementwiseMulLaunchers;

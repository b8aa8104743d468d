// vector_add: c = a + b for 1-D a and b of the same length (the CUDA extension guide's first op).
//
// Backward: da = db = dc (the sum's gradient is dc for both inputs; a and b are not read).
// This header is the op's torch-free contract: the parameter structs and the launcher table each
// variant exports. The binding (bindings/vector_add.cpp) fills the structs.
#pragma once

#include "wb_variant.h"

typedef struct WbVectorAddForward {
  int dtype;          // WbDtype of a, b and c
  int64_t n;          // elements in each vector
  const void* a;      // [n], contiguous
  const void* b;      // [n]
  void* c;            // [n] = a + b
} WbVectorAddForward;

typedef struct WbVectorAddBackward {
  int dtype;
  int64_t n;
  const void* dc;     // [n]
  void* da;           // [n] = dc
  void* db;           // [n] = dc
} WbVectorAddBackward;

typedef struct WbVectorAddLaunchers {
  int (*forward)(const WbVectorAddForward* args, const WbLaunch* launch);
  int (*backward)(const WbVectorAddBackward* args, const WbLaunch* launch);  // NULL: forward only
} WbVectorAddLaunchers;

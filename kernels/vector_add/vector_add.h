// vector_add: c = a + b for 1-D a and b of the same length (the CUDA extension guide's first op).
//
// Backward: da = db = dc (the sum's gradient is dc for both inputs; a and b are not read).
// An op of the elementwise family (kernels/common/wb_elementwise.h): this header is its math, the
// two steps below; the launcher table (WbElementwiseLaunchers) and the binding are the family's.
#pragma once

#include "wb_elementwise.h"

// The family's argument struct under this op's names, for variants written by hand (scalar.cu, cpu.cpp).
typedef WbElementwiseArgs WbVectorAddForward;   // in: a, b; out: c
typedef WbElementwiseArgs WbVectorAddBackward;  // in: dc, a, b (a and b NULL: not read); out: da, db

struct WbVectorAddForwardStep {  // a, b -> c
  static constexpr int kReads = 2, kWrites = 1;
  template <typename A>
  WB_HD void operator()(const A* in, A* out) const { out[0] = in[0] + in[1]; }
};

// dc -> da = db = dc. Through a step the value passes as the compute type: exact for float32
// (vec4's only dtype); the C++ variant copies 16-bit bits itself, so NaN payloads pass unchanged.
struct WbVectorAddBackwardStep {
  static constexpr int kReads = 1, kWrites = 2;
  template <typename A>
  WB_HD void operator()(const A* in, A* out) const { out[0] = out[1] = in[0]; }
};

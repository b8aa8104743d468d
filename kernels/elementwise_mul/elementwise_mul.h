// elementwise_mul: y = a * b, for a and b of the same shape (any shape: the kernels see n elements).
//
// Backward: da = dy * b and db = dy * a, both element-wise (no reduction).
// An op of the elementwise family (kernels/common/wb_elementwise.h): this header is its math, the
// two steps below; the launcher table (WbElementwiseLaunchers) and the binding are the family's.
#pragma once

#include "wb_elementwise.h"

// The family's argument struct under this op's names, for variants written by hand (cpu.cpp).
typedef WbElementwiseArgs WbElementwiseMulForward;   // in: a, b; out: y
typedef WbElementwiseArgs WbElementwiseMulBackward;  // in: dy, a, b; out: da, db

struct WbElementwiseMulForwardStep {  // a, b -> y
  static constexpr int kReads = 2, kWrites = 1;
  template <typename A>
  WB_HD void operator()(const A* in, A* out) const { out[0] = in[0] * in[1]; }
};

struct WbElementwiseMulBackwardStep {  // dy, a, b -> da = dy * b, db = dy * a
  static constexpr int kReads = 3, kWrites = 2;
  template <typename A>
  WB_HD void operator()(const A* in, A* out) const {
    out[0] = in[0] * in[2];
    out[1] = in[0] * in[1];
  }
};

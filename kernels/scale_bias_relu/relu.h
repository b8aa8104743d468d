// scale_bias_relu's math, host and device, in the compute type A (float, or double for float64):
// v = x * scale + b; y = relu(v); dx = dy * scale where v > 0, and dy there is the dbias term.
// NaN goes through as in PyTorch: relu(NaN) = NaN, and its gradient passes (torch's
// threshold_backward zeroes only where v <= 0).
#pragma once

#include "wb_math.h"

template <typename A>
struct WbScaleBiasRelu {
  A scale;
  WB_HD A forward(A x, A b) const {
    const A v = x * scale + b;
    return v < A(0) ? A(0) : v;
  }
  WB_HD A backward(A dy, A x, A b, A* db) const {
    const A g = x * scale + b <= A(0) ? A(0) : dy;
    *db = g;
    return g * scale;
  }
};

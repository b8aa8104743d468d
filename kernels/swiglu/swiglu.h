// swiglu: y = silu(a) * b = a * sigmoid(a) * b, for a and b of the same shape (a SwiGLU MLP's gate);
// backward, with s = sigmoid(a): da = dy * b * s * (1 + a * (1 - s)), db = dy * a * s. Its math as the
// elementwise family's two steps; the rest is the family's (kernels/common/wb_elementwise.h).
#pragma once

#include "wb_elementwise.h"

struct WbSwigluForward {  // a, b -> y
  static constexpr int kReads = 2, kWrites = 1;
  template <typename A>
  WB_HD void operator()(const A* in, A* out) const { out[0] = in[0] * wb_rcp(A(1) + wb_exp(-in[0])) * in[1]; }
};

struct WbSwigluBackward {  // dy, a, b -> da, db
  static constexpr int kReads = 3, kWrites = 2;
  template <typename A>
  WB_HD void operator()(const A* in, A* out) const {
    const A dy = in[0], a = in[1], s = wb_rcp(A(1) + wb_exp(-a));
    out[0] = dy * in[2] * s * (A(1) + a * (A(1) - s));
    out[1] = dy * a * s;
  }
};

// swiglu: y = silu(a) * b (SwiGLU's gate); with s = sigmoid(a), da = dy b s (1 + a (1 - s)), db = dy a s: the
// elementwise family's two steps. Predicted: elementwise_mul's times (same bytes). Measured (results/gpu/a8757df-h100,
// H100, 16384^2, fwd/bwd): vec4 fp32 1.046/1.766 ms, half bf16 0.521/0.882 ms (~102% of copy), scalar fp32 1.158 ms.
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

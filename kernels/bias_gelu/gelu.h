// GELU with the tanh approximation and its derivative, host and device, written so that the CPU
// variant and the GPU kernels compute the same function (bias_gelu's math; wb_math.h has the exp
// and reciprocal it is built from).
#pragma once

#include "wb_math.h"

// 0.5 * (1 + tanh(u)) == 1 / (1 + exp(-2u)): one exp and one reciprocal instead of tanh, and exact
// in both limits (exp overflows to inf -> factor 0; underflows to 0 -> factor 1).
template <typename A>
WB_HD A wb_gelu_gate(A v, A* v2_out) {
  const A k = A(0.7978845608028654);  // sqrt(2 / pi)
  const A c = A(0.044715);
  const A v2 = v * v;
  const A u = k * v * (A(1) + c * v2);
  *v2_out = v2;
  return wb_rcp(A(1) + wb_exp(A(-2) * u));
}

// y = v * 0.5 * (1 + tanh(sqrt(2/pi) * (v + 0.044715 v^3)))
template <typename A>
WB_HD A wb_gelu_tanh(A v) {
  A v2;
  return v * wb_gelu_gate(v, &v2);
}

// dy/dv = s + 2 v s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 v^2), with s the gate above. Where the gate
// has saturated (s (1 - s) == 0) the second term is exactly 0 for any finite v; testing for it
// keeps a huge finite |v| (whose v^2 overflows float) from making 0 * inf = NaN. At v = +-inf the
// result is NaN, as PyTorch's own GELU backward gives there: (v - v) adds 0 or NaN, branch-free.
template <typename A>
WB_HD A wb_gelu_tanh_grad(A v) {
  const A k = A(0.7978845608028654);
  const A c3 = A(3 * 0.044715);
  A v2;
  const A s = wb_gelu_gate(v, &v2);
  const A t = s * (A(1) - s);
  return t == A(0) ? s + (v - v) : s + A(2) * k * v * t * (A(1) + c3 * v2);
}

// bias_gelu's pointwise step for the shared row tiles (wb_row_tiles.cuh): y = GELU(x + b), and in
// the backward dx = dy GELU'(x + b), which is also the element's dbias term.
struct WbGeluOfSum {
  WB_HD float forward(float x, float b) const { return wb_gelu_tanh(x + b); }
  WB_HD float backward(float dy, float x, float b, float* db) const {
    const float g = dy * wb_gelu_tanh_grad(x + b);
    *db = g;
    return g;
  }
};

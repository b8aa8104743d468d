// softmax over the last dimension: y = exp(x - max) / sum(exp(x - max)), the max subtracted so that
// no exp overflows; dx = y * (dy - sum(dy * y)). The row family's two steps (kernels/common/wb_row.h).
// The backward recomputes y from x (the spec hands it x, not y): a max, then the two sums
// s = sum(exp(x - m)) and t = sum(dy * exp(x - m)) reduced together, so sum(dy * y) = t / s; the
// same bytes as a backward from a saved y (read two rows, write one), an exp more per element.
// Predicted (H100, 8192 x 8192, the row in registers): forward at the copy ceiling (one read of x,
// one write of y: ~0.17 ms fp32, ~0.09 ms bf16) and fwd+bwd at ~97% of its floor (5 rows of bytes),
// at or above torch.softmax, whose forward and backward move the same bytes.
#pragma once

#include "wb_row.h"

struct WbSoftmaxForward {  // x -> y
  static constexpr int kReads = 1, kWrites = 1;
  template <typename Row>
  WB_HD void operator()(const Row& row) const {
    using A = typename Row::Acc;
    const A m = row.max([](const A* in) { return in[0]; });
    const A r = A(1) / row.sum([&](const A* in) { return wb_exp(in[0] - m); });
    row.write([&](const A* in, A* out) { out[0] = wb_exp(in[0] - m) * r; });
  }
};

struct WbSoftmaxBackward {  // dy, x -> dx
  static constexpr int kReads = 2, kWrites = 1;
  template <typename Row>
  WB_HD void operator()(const Row& row) const {
    using A = typename Row::Acc;
    const A m = row.max([](const A* in) { return in[1]; });
    const WbSum2<A> st = row.sum([&](const A* in) {
      const A e = wb_exp(in[1] - m);
      return WbSum2<A>{e, in[0] * e};
    });
    const A r = A(1) / st.a, dot = st.b * r;
    row.write([&](const A* in, A* out) { out[0] = wb_exp(in[1] - m) * r * (in[0] - dot); });
  }
};

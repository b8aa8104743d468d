// l2_normalize over the last dimension (F.normalize(x, dim=-1)): y = x / max(r, eps), r = |x|_2;
// dx = dy / r - x * sum(dy * x) / r^3 where r >= eps, dy / eps where the norm is clamped. The row
// family's two steps (kernels/common/wb_row.h), one reduction each (the backward's two sums
// together): softmax's bytes and layout. Predicted (H100, 8192 x 8192): softmax's times.
#pragma once

#include "wb_row.h"

struct WbL2NormalizeForward {  // x -> y
  static constexpr int kReads = 1, kWrites = 1;
  double eps;
  explicit WbL2NormalizeForward(const WbRowArgs& a) : eps(a.attrs[0].f) {}
  template <typename Row>
  WB_HD void operator()(const Row& row) const {
    using A = typename Row::Acc;
    const A r = sqrt(row.sum([](const A* in) { return in[0] * in[0]; }));
    const A inv = A(1) / wb_max(r, A(eps));
    row.write([&](const A* in, A* out) { out[0] = in[0] * inv; });
  }
};

struct WbL2NormalizeBackward {  // dy, x -> dx
  static constexpr int kReads = 2, kWrites = 1;
  double eps;
  explicit WbL2NormalizeBackward(const WbRowArgs& a) : eps(a.attrs[0].f) {}
  template <typename Row>
  WB_HD void operator()(const Row& row) const {
    using A = typename Row::Acc;
    const WbSum2<A> s = row.sum([](const A* in) { return WbSum2<A>{in[1] * in[1], in[0] * in[1]}; });
    const A r = sqrt(s.a);
    if (!(r < A(eps))) {  // through the norm (as torch's clamp_min: r == eps too; a NaN norm: NaN out)
      const A inv = A(1) / r, c = s.b * inv * inv * inv;
      row.write([&](const A* in, A* out) { out[0] = in[0] * inv - in[1] * c; });
    } else {
      const A inv = A(1) / A(eps);
      row.write([&](const A* in, A* out) { out[0] = in[0] * inv; });
    }
  }
};

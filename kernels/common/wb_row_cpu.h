// The row family's C++ CPU launchers (the contract: wb_row.h): rows on the front end's thread pool
// (torch's, or the NumPy module's), 16-bit values converted to float exactly as PyTorch does and
// rounded once. Any alignment and size. An op's cpu.cpp is
//
//   const WbRowLaunchers launchers = wb_row::cpu_launchers<WB_F32 | WB_F64, MyOpForward, MyOpBackward>();
#pragma once

#include <utility>

#include "wb_cpu.h"
#include "wb_row.h"

namespace wb_row {

constexpr int64_t kCpuGrain = 1 << 15;  // elements a task takes at least: below this, threading costs more
constexpr int64_t kCpuChunk = 256;      // a sum adds chunks of this many elements, then the chunks' sums

// One row, as a step sees it: its reductions are loops over the row.
template <typename T, int R, int W>
class CpuRow {
 public:
  using Acc = wb_acc_t<T>;

  CpuRow(const WbRowArgs& p, int64_t row) : n_(p.n) {
    for (int k = 0; k < R; ++k) in_[k] = static_cast<const T*>(p.in[k]) + row * n_;
    for (int k = 0; k < W; ++k) out_[k] = static_cast<T*>(p.out[k]) + row * n_;
  }

  int64_t n() const { return n_; }  // the row's length

  // In chunks, so that the rounding error grows with kCpuChunk + n / kCpuChunk, not with n.
  template <typename F>
  auto sum(F f) const {
    using S = decltype(f(std::declval<const Acc*>()));
    S total{};
    for (int64_t c0 = 0; c0 < n_; c0 += kCpuChunk) {
      S part{};
      for (int64_t c = c0; c < c0 + kCpuChunk && c < n_; ++c) part = part + f(values(c).x);
      total = total + part;
    }
    return total;
  }

  template <typename F>
  Acc max(F f) const {
    Acc m = wb_neg_inf(Acc{});
    for (int64_t c = 0; c < n_; ++c) m = wb_max(m, f(values(c).x));
    return m;
  }

  template <typename F>
  void write(F f) const {
    for (int64_t c = 0; c < n_; ++c) {
      Acc y[W];
      f(values(c).x, y);
      for (int k = 0; k < W; ++k) out_[k][c] = wb_from_acc<T>(y[k]);
    }
  }

 private:
  struct Values {
    Acc x[R];
  };
  Values values(int64_t c) const {
    Values v;
    for (int k = 0; k < R; ++k) v.x[k] = wb_to_acc(in_[k][c]);
    return v;
  }

  const T* in_[R];
  T* out_[W];
  int64_t n_;
};

template <typename T, typename S>
void cpu_run(const WbRowArgs* p, const WbLaunch* l) {
  const S f = make_step<S>(*p);
  const int64_t grain = p->n < kCpuGrain ? kCpuGrain / p->n : 1;
  wb_parallel_for(l, 0, p->rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) f(CpuRow<T, S::kReads, S::kWrites>(*p, r));
  });
}

// One step as a launcher, for the dtypes in DTYPES.
template <unsigned DTYPES, typename S>
int cpu_step(const WbRowArgs* p, const WbLaunch* l) {
  return wb_dispatch_dtype<DTYPES>(p->dtype, [&](auto tag) {
    cpu_run<typename decltype(tag)::type, S>(p, l);
    return static_cast<int>(WB_OK);
  });
}

template <unsigned DTYPES, typename Forward, typename Backward>
constexpr WbRowLaunchers cpu_launchers() {
  return {cpu_step<DTYPES, Forward>, cpu_step<DTYPES, Backward>};
}

}  // namespace wb_row

// The row family's contract: ops over the rows of their tensors' last dimension, every tensor
// [rows, n], where each row of the outputs is computed from the same row of the inputs and from
// sums and maxes over that row (softmax, l2_normalize). Such an op's header (kernels/<op>/<op>.h)
// is its math, as two steps; the launcher table, the binding (WB_EXPORT_BINDING(op, WB_ROW_STEPS),
// bindings/wb_binding.h), the dtype dispatch, the row layout (a warp or a block per row, the row
// kept in registers or read again), the warp and block reductions and the row loop come from here
// and from wb_row.cuh (CUDA) and wb_row_cpu.h (C++). A step is a functor over one row:
//
//   struct MyOpForward {                                  // x -> y
//     static constexpr int kReads = 1, kWrites = 1;       // leading streams of args.in / args.out
//     template <typename Row>
//     WB_HD void operator()(const Row& row) const {
//       using A = typename Row::Acc;                      // the compute type: float, or double
//       const A m = row.max([](const A* in) { return in[0]; });               // over the row
//       const A s = row.sum([&](const A* in) { return wb_exp(in[0] - m); });  // A, or WbSum2<A>
//       row.write([&](const A* in, A* out) { out[0] = wb_exp(in[0] - m) / s; });
//     }
//   };
//
// row.sum and row.max take one element's values of the kReads streams and return the reduction
// over the row, the same in every thread of the row; row.write computes each element's kWrites
// outputs; row.n() is the row's length. Every thread of a row makes the same reductions in the same
// order (they meet at barriers): never inside a branch taken by some elements only; a branch on a
// row's reduction is fine. A step may take the op's attributes with a constructor
// `explicit MyOpForward(const WbRowArgs&)` (reading args.attrs). No torch, no CUDA here.
//
// Rows are never empty: the front end launches nothing where a tensor a step reads is empty
// (bindings/harness/call_contract.h), so every launcher of a row op, of this family or written by
// hand (rmsnorm, reduce_sum), is called with rows >= 1 and n >= 1.
#pragma once

#include <type_traits>

#include "wb_math.h"
#include "wb_op.h"

typedef struct WbRowArgs {
  int dtype;                     // WbDtype of every tensor
  int64_t rows, n;               // every tensor is [rows, n], contiguous; rows, n >= 1
  // Forward: the op's inputs, in declaration order. Backward: one gradient per output, then the
  // op's inputs (NULL for one the spec declares read_by_backward=False).
  const void* in[WB_MAX_ARGS];
  // Forward: the outputs. Backward: one gradient per differentiable input, in declaration order.
  void* out[WB_MAX_ARGS];
  WbAttr attrs[WB_MAX_ARGS];     // the op's attributes in declaration order (.f float, .i int and bool)
} WbRowArgs;

typedef struct WbRowLaunchers {
  int (*forward)(const WbRowArgs* args, const WbLaunch* launch);
  int (*backward)(const WbRowArgs* args, const WbLaunch* launch);  // NULL: forward only
} WbRowLaunchers;

namespace wb_row {

// The step functor for a call: built from the call's attributes where it takes them.
template <typename S>
inline S make_step(const WbRowArgs& args) {
  static_assert(S::kReads >= 1 && S::kReads <= WB_MAX_ARGS && S::kWrites >= 1 && S::kWrites <= WB_MAX_ARGS,
                "a step reads 1 to WB_MAX_ARGS streams and writes 1 to WB_MAX_ARGS");
  if constexpr (std::is_constructible_v<S, const WbRowArgs&>) return S(args);
  else return S{};
}

}  // namespace wb_row

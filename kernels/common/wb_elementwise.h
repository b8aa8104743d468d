// The elementwise family's contract: ops whose tensors all have the same n elements and whose
// forward and backward compute each element from the same element of their inputs (vector_add,
// elementwise_mul, swiglu). Such an op's header (kernels/<op>/<op>.h) is its math, as two steps;
// the launcher table, the binding (WB_EXPORT_BINDING(op, WB_ELEMENTWISE_STEPS), bindings/wb_binding.h),
// the dtype dispatch, the flat tiles, alignment and tail routing come from here and from
// wb_elementwise.cuh (CUDA) and wb_elementwise_cpu.h (C++). A step is a functor:
//
//   struct MyOpForward {                                  // a, b -> y
//     static constexpr int kReads = 2, kWrites = 1;       // leading streams of args.in / args.out
//     template <typename A>                               // the compute type: float, or double
//     WB_HD void operator()(const A* in, A* out) const;   // in[kReads] -> out[kWrites], one element
//   };
//
// and may take the op's attributes with a constructor `explicit MyOpForward(const WbElementwiseArgs&)`
// (reading args.attrs). A variant may also be written by hand against WbElementwiseArgs: the
// helpers are a convenience, not the ABI. No torch, no CUDA here.
#pragma once

#include <type_traits>

#include "wb_math.h"
#include "wb_op.h"

typedef struct WbElementwiseArgs {
  int dtype;                     // WbDtype of every tensor
  int64_t n;                     // elements in each tensor, contiguous
  // Forward: the op's inputs, in declaration order. Backward: one gradient per output, then the
  // op's inputs (NULL for one the spec declares read_by_backward=False).
  const void* in[WB_MAX_ARGS];
  // Forward: the outputs. Backward: one gradient per differentiable input, in declaration order.
  void* out[WB_MAX_ARGS];
  WbAttr attrs[WB_MAX_ARGS];     // the op's attributes in declaration order (.f float, .i int and bool)
} WbElementwiseArgs;

typedef struct WbElementwiseLaunchers {
  int (*forward)(const WbElementwiseArgs* args, const WbLaunch* launch);
  int (*backward)(const WbElementwiseArgs* args, const WbLaunch* launch);  // NULL: forward only
} WbElementwiseLaunchers;

namespace wb_elementwise {

// The step functor for a call: built from the call's attributes where it takes them.
template <typename S>
inline S make_step(const WbElementwiseArgs& args) {
  static_assert(S::kReads >= 1 && S::kReads <= WB_MAX_ARGS && S::kWrites >= 1 && S::kWrites <= WB_MAX_ARGS,
                "a step reads 1 to WB_MAX_ARGS streams and writes 1 to WB_MAX_ARGS");
  if constexpr (std::is_constructible_v<S, const WbElementwiseArgs&>) return S(args);
  else return S{};
}

}  // namespace wb_elementwise

// What an op's binding file (bindings/<op>.cpp) needs: the call ABI (kernels/common/wb_op.h) and
// WB_EXPORT_BINDING, which turns typed step functions into the exported C table.
//
// A binding is torch-free: the front end has already checked the call against the op's
// declaration (devices, dtypes, shapes, attributes), made the inputs contiguous and allocated the
// outputs. Each step function fills the op's parameter struct and calls the variant's launcher:
//
//   int forward(const WbCall& call, const WbMyOpLaunchers& launchers, const WbLaunch* launch);
//   size_t backward_workspace(const WbCall& call, const WbMyOpLaunchers& launchers, const WbLaunch* launch);
//   WB_EXPORT_BINDING(my_op, WbMyOpLaunchers, forward, backward, nullptr, backward_workspace)
//
// A step the op does not have, or that needs no workspace, is nullptr.
//
// An op of the elementwise family (kernels/common/wb_elementwise.h) or of the row family
// (wb_row.h) needs none of that: its whole binding is WB_EXPORT_BINDING(my_op, WB_ELEMENTWISE_STEPS)
// or WB_EXPORT_BINDING(my_op, WB_ROW_STEPS), whose steps hand the call's tensors, in order, and its
// attributes to the variant's WbElementwiseLaunchers or WbRowLaunchers.
#pragma once

#include <stddef.h>

#include <cstddef>

#include "wb_elementwise.h"
#include "wb_op.h"
#include "wb_row.h"

namespace wb_binding {

template <typename L>
using StepFn = int (*)(const WbCall&, const L&, const WbLaunch*);
template <typename L>
using WorkspaceFn = size_t (*)(const WbCall&, const L&, const WbLaunch*);

template <typename L>
inline int run(StepFn<L> fn, const WbCall* call, const void* launchers, const WbLaunch* launch) {
  return fn ? fn(*call, *static_cast<const L*>(launchers), launch) : WB_ERR_ARGUMENT;
}
template <typename L>
inline int run(std::nullptr_t, const WbCall*, const void*, const WbLaunch*) { return WB_ERR_ARGUMENT; }

template <typename L>
inline size_t workspace(WorkspaceFn<L> fn, const WbCall* call, const void* launchers, const WbLaunch* launch) {
  return fn ? fn(*call, *static_cast<const L*>(launchers), launch) : 0;
}
template <typename L>
inline size_t workspace(std::nullptr_t, const WbCall*, const void*, const WbLaunch*) { return 0; }

// The backward workspace of an op over rows of its first input (bias_gelu, scale_bias_relu, rmsnorm:
// backward inputs grad_y, x, ...): what its launchers ask for rows x last dim of x, or none.
template <typename L>
inline size_t rows_backward_workspace(const WbCall& c, const L& l, const WbLaunch* launch) {
  const WbTensor& x = c.inputs[1];
  return l.backward_workspace_bytes ? l.backward_workspace_bytes(wb_rows(&x), wb_last_dim(&x), c.dtype, launch) : 0;
}

// A family's arguments: the call's tensors as they come (inputs, outputs) and its attributes.
template <typename Args>
inline Args family_args(const WbCall& c) {
  Args a{};
  a.dtype = c.dtype;
  for (int i = 0; i < c.n_inputs; ++i) a.in[i] = c.inputs[i].data;
  for (int i = 0; i < c.n_outputs; ++i) a.out[i] = c.outputs[i].data;
  for (int i = 0; i < c.n_attrs; ++i) a.attrs[i] = c.attrs[i];
  return a;
}
// The elementwise family: the front end has checked that every tensor has the same n elements
// (outputs[0] always exists).
inline WbElementwiseArgs args_for(const WbCall& c, const WbElementwiseLaunchers&) {
  WbElementwiseArgs a = family_args<WbElementwiseArgs>(c);
  a.n = c.outputs[0].numel;
  return a;
}
// The row family: every tensor is [rows, n], as the first input (x, or the backward's grad_y).
inline WbRowArgs args_for(const WbCall& c, const WbRowLaunchers&) {
  WbRowArgs a = family_args<WbRowArgs>(c);
  a.rows = wb_rows(&c.inputs[0]);
  a.n = wb_last_dim(&c.inputs[0]);
  return a;
}
template <typename L>
inline int family_forward(const WbCall& c, const L& l, const WbLaunch* launch) {
  const auto a = args_for(c, l);
  return l.forward(&a, launch);
}
template <typename L>
inline int family_backward(const WbCall& c, const L& l, const WbLaunch* launch) {
  const auto a = args_for(c, l);
  return l.backward(&a, launch);
}

}  // namespace wb_binding

// Variadic, so that one macro can stand for the five arguments after OP (WB_ELEMENTWISE_STEPS).
#define WB_EXPORT_BINDING(...) WB_EXPORT_BINDING_TABLE(__VA_ARGS__)
#define WB_EXPORT_BINDING_TABLE(OP, LAUNCHERS, FORWARD, BACKWARD, FORWARD_WORKSPACE, BACKWARD_WORKSPACE)        \
  static_assert(offsetof(LAUNCHERS, forward) == 0 && offsetof(LAUNCHERS, backward) == sizeof(void*),            \
                #LAUNCHERS " must start with its forward and backward launchers (see wb_op.h)");                \
  static int wb_binding_run(int step, const WbCall* call, const void* launchers, const WbLaunch* launch) {      \
    return step == WB_STEP_FORWARD ? wb_binding::run<LAUNCHERS>(FORWARD, call, launchers, launch)               \
                                   : wb_binding::run<LAUNCHERS>(BACKWARD, call, launchers, launch);             \
  }                                                                                                             \
  static size_t wb_binding_workspace(int step, const WbCall* call, const void* launchers,                       \
                                     const WbLaunch* launch) {                                                  \
    return step == WB_STEP_FORWARD ? wb_binding::workspace<LAUNCHERS>(FORWARD_WORKSPACE, call, launchers, launch) \
                                   : wb_binding::workspace<LAUNCHERS>(BACKWARD_WORKSPACE, call, launchers, launch); \
  }                                                                                                             \
  extern "C" __attribute__((visibility("default"))) const WbOpBinding* workbench_op_binding(void) {            \
    static const WbOpBinding table = {WB_BINDING_ABI_VERSION, #OP, wb_binding_workspace, wb_binding_run};      \
    return &table;                                                                                              \
  }

// A family's launcher table and steps, no workspace: WB_EXPORT_BINDING(my_op, WB_ELEMENTWISE_STEPS).
#define WB_FAMILY_STEPS(LAUNCHERS) \
  LAUNCHERS, wb_binding::family_forward<LAUNCHERS>, wb_binding::family_backward<LAUNCHERS>, nullptr, nullptr
#define WB_ELEMENTWISE_STEPS WB_FAMILY_STEPS(WbElementwiseLaunchers)
#define WB_ROW_STEPS WB_FAMILY_STEPS(WbRowLaunchers)

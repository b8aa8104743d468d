// rmsnorm's binding: fills its parameter structs (kernels/rmsnorm/rmsnorm.h) from a checked call.
// Declared in workbench/specs/rmsnorm.py: x [..., h], weight [h], eps -> y [..., h]; x is seen as
// [rows, h].
#include "rmsnorm.h"
#include "wb_binding.h"

namespace {

using Launchers = WbRmsnormLaunchers;

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &x = c.inputs[0], &weight = c.inputs[1];
  const WbRmsnormForward p{c.dtype, wb_rows(&x), wb_last_dim(&x), x.data, weight.data, c.outputs[0].data,
                           c.attrs[0].f};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_y, x, weight; outputs dx, dweight.
int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &dy = c.inputs[0], &x = c.inputs[1], &weight = c.inputs[2];
  const WbRmsnormBackward p{c.dtype,           wb_rows(&x),       wb_last_dim(&x), dy.data,     x.data,
                            weight.data,       c.outputs[0].data, c.outputs[1].data, c.attrs[0].f,
                            c.workspace};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(rmsnorm, Launchers, forward, backward, nullptr, wb_binding::rows_backward_workspace<Launchers>)

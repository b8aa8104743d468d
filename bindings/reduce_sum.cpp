// reduce_sum's binding: fills its parameter structs (kernels/reduce_sum/reduce_sum.h) from a checked
// call. Declared in workbench/specs/reduce_sum.py: x [..., n] -> y [...]; x is seen as [rows, n].
#include "reduce_sum.h"
#include "wb_binding.h"

namespace {

using Launchers = WbReduceSumLaunchers;

size_t forward_workspace(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor& x = c.inputs[0];
  return l.forward_workspace_bytes ? l.forward_workspace_bytes(wb_rows(&x), wb_last_dim(&x), c.dtype, launch) : 0;
}

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor& x = c.inputs[0];
  const WbReduceSumForward p{c.dtype, wb_rows(&x), wb_last_dim(&x), x.data, c.outputs[0].data, c.workspace};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_y, x (its shape only: the backward does not read x); output dx.
int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &dy = c.inputs[0], &x = c.inputs[1];
  const WbReduceSumBackward p{c.dtype, wb_rows(&x), wb_last_dim(&x), dy.data, c.outputs[0].data};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(reduce_sum, Launchers, forward, backward, forward_workspace, nullptr)

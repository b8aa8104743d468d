// bias_gelu's binding: fills its parameter structs (kernels/bias_gelu/bias_gelu.h) from a checked
// call. Declared in workbench/specs/bias_gelu.py: x [..., n], bias [n] -> y [..., n]; x is seen
// as [rows, n].
#include "bias_gelu.h"
#include "wb_binding.h"

namespace {

using Launchers = WbBiasGeluLaunchers;

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &x = c.inputs[0], &bias = c.inputs[1];
  const WbBiasGeluForward p{c.dtype, wb_rows(&x), wb_last_dim(&x), x.data, bias.data, c.outputs[0].data};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_y, x, bias; outputs dx, dbias.
int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &dy = c.inputs[0], &x = c.inputs[1], &bias = c.inputs[2];
  const WbBiasGeluBackward p{c.dtype,  wb_rows(&x), wb_last_dim(&x),   dy.data,    x.data,
                             bias.data, c.outputs[0].data, c.outputs[1].data, c.workspace};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(bias_gelu, Launchers, forward, backward, nullptr, wb_binding::rows_backward_workspace<Launchers>)

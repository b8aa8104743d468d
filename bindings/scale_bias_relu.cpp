// scale_bias_relu's binding: fills its parameter structs (kernels/scale_bias_relu/scale_bias_relu.h)
// from a checked call. Declared in workbench/specs/scale_bias_relu.py: x [..., n], bias [n],
// float scale -> y [..., n]; x is seen as [rows, n].
#include "scale_bias_relu.h"
#include "wb_binding.h"

namespace {

using Launchers = WbScaleBiasReluLaunchers;

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &x = c.inputs[0], &bias = c.inputs[1];
  const WbScaleBiasReluForward p{c.dtype, wb_rows(&x), wb_last_dim(&x), c.attrs[0].f, x.data, bias.data,
                                 c.outputs[0].data};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_y, x, bias; outputs dx, dbias.
int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &dy = c.inputs[0], &x = c.inputs[1], &bias = c.inputs[2];
  const WbScaleBiasReluBackward p{c.dtype,   wb_rows(&x), wb_last_dim(&x),   c.attrs[0].f,      dy.data,
                                  x.data,    bias.data,   c.outputs[0].data, c.outputs[1].data, c.workspace};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(scale_bias_relu, Launchers, forward, backward, nullptr, wb_binding::rows_backward_workspace<Launchers>)

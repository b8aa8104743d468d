// matmul's binding: fills its parameter structs (kernels/matmul/matmul.h) from a checked call.
// Declared in workbench/specs/matmul.py: a [m, k], b [k, n] -> y [m, n]; the front end has checked
// the ranks and that a's k equals b's k, and never calls with an empty input.
#include "matmul.h"
#include "wb_binding.h"

namespace {

using Launchers = WbMatmulLaunchers;

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &a = c.inputs[0], &b = c.inputs[1];
  const WbMatmulForward p{c.dtype, a.sizes[0], a.sizes[1], b.sizes[1], a.data, b.data, c.outputs[0].data};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_y, a, b; outputs da, db.
size_t backward_workspace(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &a = c.inputs[1], &b = c.inputs[2];
  return l.backward_workspace_bytes ? l.backward_workspace_bytes(a.sizes[0], a.sizes[1], b.sizes[1], c.dtype, launch)
                                    : 0;
}

int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbTensor &dy = c.inputs[0], &a = c.inputs[1], &b = c.inputs[2];
  const WbMatmulBackward p{c.dtype, a.sizes[0], a.sizes[1], b.sizes[1], dy.data, a.data, b.data,
                           c.outputs[0].data, c.outputs[1].data, c.workspace};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(matmul, Launchers, forward, backward, nullptr, backward_workspace)

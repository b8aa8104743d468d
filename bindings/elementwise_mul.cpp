// elementwise_mul's binding: fills its parameter structs (kernels/elementwise_mul/elementwise_mul.h)
// from a checked call. Declared in workbench/specs/elementwise_mul.py: a [...], b [...] -> y [...].
#include "elementwise_mul.h"
#include "wb_binding.h"

namespace {

using Launchers = WbElementwiseMulLaunchers;

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbElementwiseMulForward p{c.dtype, c.inputs[0].numel, c.inputs[0].data, c.inputs[1].data, c.outputs[0].data};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_y, a, b; outputs da, db.
int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbElementwiseMulBackward p{c.dtype, c.inputs[1].numel, c.inputs[0].data, c.inputs[1].data,
                                   c.inputs[2].data, c.outputs[0].data, c.outputs[1].data};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(elementwise_mul, Launchers, forward, backward, nullptr, nullptr)

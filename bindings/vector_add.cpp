// vector_add's binding: fills its parameter structs (kernels/vector_add/vector_add.h) from a
// checked call. Declared in workbench/specs/vector_add.py: a [n], b [n] -> c [n].
#include "vector_add.h"
#include "wb_binding.h"

namespace {

using Launchers = WbVectorAddLaunchers;

int forward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbVectorAddForward p{c.dtype, c.inputs[0].numel, c.inputs[0].data, c.inputs[1].data, c.outputs[0].data};
  return l.forward(&p, launch);
}

// Backward call: inputs grad_c, a, b (a and b shape only: not read); outputs da, db.
int backward(const WbCall& c, const Launchers& l, const WbLaunch* launch) {
  const WbVectorAddBackward p{c.dtype, c.inputs[0].numel, c.inputs[0].data, c.outputs[0].data, c.outputs[1].data};
  return l.backward(&p, launch);
}

}  // namespace

WB_EXPORT_BINDING(vector_add, Launchers, forward, backward, nullptr, nullptr)

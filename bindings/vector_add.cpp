// vector_add's binding: the elementwise family's (bindings/wb_binding.h). Declared in
// workbench/specs/vector_add.py: a [n], b [n] -> c [n]; the backward reads grad_c alone.
#include "vector_add.h"
#include "wb_binding.h"

WB_EXPORT_BINDING(vector_add, WB_ELEMENTWISE_STEPS)

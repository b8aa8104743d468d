// elementwise_mul's binding: the elementwise family's (bindings/wb_binding.h). Declared in
// workbench/specs/elementwise_mul.py: a [...], b [...] -> y [...].
#include "elementwise_mul.h"
#include "wb_binding.h"

WB_EXPORT_BINDING(elementwise_mul, WB_ELEMENTWISE_STEPS)

// swiglu's binding: the elementwise family's. Declared in workbench/specs/swiglu.py.
#include "swiglu.h"
#include "wb_binding.h"
WB_EXPORT_BINDING(swiglu, WB_ELEMENTWISE_STEPS)

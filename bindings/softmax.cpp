// softmax's binding: the row family's. Declared in workbench/specs/softmax.py.
#include "softmax.h"
#include "wb_binding.h"
WB_EXPORT_BINDING(softmax, WB_ROW_STEPS)

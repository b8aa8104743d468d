// l2_normalize's binding: the row family's. Declared in workbench/specs/l2_normalize.py.
#include "l2_normalize.h"
#include "wb_binding.h"
WB_EXPORT_BINDING(l2_normalize, WB_ROW_STEPS)

// cpu: the reference on machines without a GPU and in CI; a row per task on the thread pool.
#include "l2_normalize.h"
#include "wb_row_cpu.h"
static const WbRowLaunchers launchers =
    wb_row::cpu_launchers<WB_F32 | WB_F64 | WB_F16 | WB_BF16, WbL2NormalizeForward, WbL2NormalizeBackward>();
WB_EXPORT_VARIANT(l2_normalize, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16, "C++ on the CPU thread pool, "
                  "a row per task, 16-bit values in float; any alignment and size", launchers, wb_cpu_status_string)

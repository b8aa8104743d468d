#include "swiglu.h"
#include "wb_elementwise_cpu.h"
static const WbElementwiseLaunchers launchers =
    wb_elementwise::cpu_launchers<WB_F32 | WB_F64 | WB_F16 | WB_BF16, WbSwigluForward, WbSwigluBackward>();
WB_EXPORT_VARIANT(swiglu, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16, "C++ on the CPU thread pool, chunks of "
                  "elements, 16-bit values in float; any alignment and size", launchers, wb_cpu_status_string)

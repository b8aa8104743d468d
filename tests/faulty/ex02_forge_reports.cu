// Planted cheat (tests only), class 1 of issue 38: load-time code that forges the reports. The
// forward computes nothing; a static initializer replaces, in the interpreter it is loaded in, the
// correctness check with one that passes every case (the old checker's child ran the checks and
// handed their reports to the parent). Expected verdict now: the judge compares the outputs in its
// own memory; correctness FAIL (NaN where nothing was written).
#include "ex02_base.cuh"

namespace {

int forward(const WbBiasGeluForward* a, const WbLaunch*) { return a->dtype == WB_FLOAT32 ? WB_OK : WB_ERR_DTYPE; }

const WbBiasGeluLaunchers launchers = {forward, ex02::backward, ex02::workspace_bytes};

const bool forged = ex02::run_python(
    "import workbench.measure.correctness as c\n"
    "_real = c.check\n"
    "def _forged(*a, **k):\n"
    "    r = _real(*a, **k)\n"
    "    for case in r.cases:\n"
    "        case.passed = True\n"
    "    return r\n"
    "c.check = _forged\n");

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted: computes nothing, and forges the reports at load",
                  launchers, wb_cuda_status_string)

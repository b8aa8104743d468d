// Planted cheat (tests only), class 1 of issue 38: load-time code that rewrites the timing. The
// forward is right but moves every byte twice (about 0.5x the reference); a static initializer
// reaches the interpreter of the process it is loaded in (the old checker loaded the library in a
// Python child that also timed it) and makes the timer report half. Expected verdict now: the
// runner that loads it has no interpreter and times nothing; speed FAIL, below target.
#include "ex02_base.cuh"

namespace {

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  const int status = ex02::forward_rows(a, l, a->rows);  // once for the output...
  return status != WB_OK ? status : ex02::forward_rows(a, l, a->rows);  // ...and all of it again
}

const WbBiasGeluLaunchers launchers = {forward, ex02::backward, ex02::workspace_bytes};

const bool patched = ex02::run_python(
    "import time, sys\n"
    "_real = time.perf_counter\n"
    "_t0 = _real()\n"
    "time.perf_counter = lambda: _t0 + (_real() - _t0) * 0.5\n"
    "for m in list(sys.modules.values()):\n"
    "    if getattr(m, '__name__', '').startswith('workbench') and hasattr(m, 'perf_counter'):\n"
    "        m.perf_counter = time.perf_counter\n");

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted: twice the work, and a timer patched at load",
                  launchers, wb_cuda_status_string)

// Planted cheat (tests only), class 3 of issue 38: part of the work on the calls nobody checks. On
// inputs of a timed size (2^22 elements or more) the forward writes every row on one call in eight
// and half of the rows on the others; the old checker verified some timed calls, not all. Small
// inputs (the correctness matrix) are done right. Expected verdict now: every counted call's output
// is verified; speed FAIL, its timed output wrong.
#include "ex02_base.cuh"

namespace {

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  static long calls = 0;
  const bool timed_size = a->rows * a->cols >= (int64_t{1} << 22);
  const bool whole = !timed_size || (calls++ % 8 == 7);
  return ex02::forward_rows(a, l, whole ? a->rows : a->rows / 2);
}

const WbBiasGeluLaunchers launchers = {forward, ex02::backward, ex02::workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted: half the rows on most timed calls",
                  launchers, wb_cuda_status_string)

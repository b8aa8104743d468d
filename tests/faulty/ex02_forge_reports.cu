// Planted cheat (tests only), class 1 of issue 38: load-time code that forges the reports. The
// forward computes nothing of GELU: it copies x to y with the 16-byte loads and stores the rules ask
// for; a static initializer replaces, in the interpreter it is loaded in, the correctness check
// with one that passes every case (the old checker's child ran the checks and handed their reports
// to the parent). Expected verdict now: the judge compares the outputs in its own memory;
// correctness FAIL.
#include "ex02_base.cuh"

namespace {

__global__ void copy_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n4) y[i] = x[i];
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t n4 = a->rows * a->cols / 4;
  if (n4 == 0) return WB_OK;
  copy_vec4<<<wb_ceil_div(n4, ex02::kBlock), ex02::kBlock, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float4*>(a->x), static_cast<float4*>(a->y), n4);
  return wb_launch_status();
}

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

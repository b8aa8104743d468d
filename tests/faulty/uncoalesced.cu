// Planted slowness (tests only): correct results, but the threads walk the matrix column by column.
// Thread i handles row i % rows of column i / rows, so the 32 threads of a warp touch 32 different
// rows of one column, cols * 4 bytes apart: each load and store of x and y fetches a 32-byte sector
// per thread and uses 4 of its bytes (12.5% sector efficiency, 32 sectors per request where a
// row-major walk needs 4). The profiler's verdict must say "uncoalesced" (tests/test_profile.py).
#include "bias_gelu.h"
#include "wb_cuda.h"
#include "gelu.h"

namespace {
__global__ void column_walk_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                   float* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i % rows, c = i / rows;  // the flaw: consecutive threads go down a column
  const int64_t at = r * cols + c;
  y[at] = wb_gelu_tanh(x[at] + bias[c]);
}

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const int64_t n = a->rows * a->cols;
  if (n == 0) return WB_OK;
  column_walk_kernel<<<wb_ceil_div(n, 256), 256, 0, static_cast<cudaStream_t>(l->stream)>>>(
      static_cast<const float*>(a->x), static_cast<const float*>(a->bias), static_cast<float*>(a->y), a->rows,
      a->cols);
  return wb_launch_status();
}
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted slowness: threads walk columns (uncoalesced)",
                  launchers, wb_cuda_status_string)

// scalar: the guide's vector_add kernel. One thread adds one element per step with plain loads and
// stores, in a grid-stride loop: the grid is sized to the GPU (a few blocks per SM), not to n, and
// each thread strides by the whole grid, so any n runs with the same launch. Templated over float,
// double, half and bfloat16, computing in float for the 16-bit types (double for double, so a
// true float64 gradcheck runs on the GPU). The backward writes dc into da and db in one pass.
// Predicted: a bit below the copy bandwidth for three arrays (12 bytes per float32 element: two
// reads, one write); 4-byte accesses need 4x the memory instructions of vec4's for the same bytes
// (elementwise_mul's one-element-per-thread scalar, the same stream: 93% on the H100).
// Measured (results/gpu/1e52cd0, H100, float32): 2^26 0.285 ms, 94% of the copy bandwidth (0.91x
// eager, which is vectorized); 2^28 90%. The miss is in 16-bit: 2-byte accesses move 64 bytes per warp
// request, and a thread's one element per pass leaves too few bytes in flight: fp16/bf16 at 72-74%
// (0.70x eager) from 2^24 up. A 16-bit vec variant would close it; left to an exercise.
// Through the NumPy front end (results/gpu/36f9438/ndarray): 89%.
#include "vector_add.h"
#include "wb_cuda.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 2048 resident threads per SM on sm_80/sm_90: a full SM each

template <typename T>
__global__ void forward_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    c[i] = wb_from_acc<T>(wb_to_acc(a[i]) + wb_to_acc(b[i]));
}

template <typename T>
__global__ void backward_kernel(const T* __restrict__ dc, T* __restrict__ da, T* __restrict__ db, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T g = dc[i];
    da[i] = g;
    db[i] = g;
  }
}

// Enough blocks to fill every SM, never more than n needs.
unsigned grid_for(int64_t n, const WbLaunch* l) {
  const int64_t cap = static_cast<int64_t>(l->num_sms > 0 ? l->num_sms : 1) * kBlocksPerSm;
  const int64_t need = wb_ceil_div(n, kThreads);
  return static_cast<unsigned>(need < cap ? need : cap);
}

int forward(const WbVectorAddForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T><<<grid_for(p->n, l), kThreads, 0, static_cast<cudaStream_t>(l->stream)>>>(
        static_cast<const T*>(p->in[0]), static_cast<const T*>(p->in[1]), static_cast<T*>(p->out[0]), p->n);
    return wb_launch_status();
  });
}

int backward(const WbVectorAddBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<T><<<grid_for(p->n, l), kThreads, 0, static_cast<cudaStream_t>(l->stream)>>>(
        static_cast<const T*>(p->in[0]), static_cast<T*>(p->out[0]), static_cast<T*>(p->out[1]), p->n);
    return wb_launch_status();
  });
}

const WbElementwiseLaunchers launchers = {forward, backward};

}  // namespace

WB_EXPORT_VARIANT(vector_add, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "one element per thread per step, grid-stride loop over a grid sized to the GPU, "
                  "64-bit indexing; any alignment and size", launchers, wb_cuda_status_string)

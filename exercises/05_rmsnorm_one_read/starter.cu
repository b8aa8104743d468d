// Exercise 05 (RMSNorm, one read of x) - starter.
//
// A correct rmsnorm (y = x / sqrt(mean(x^2) + eps) * weight over the last dimension) for float32,
// float16 and bfloat16. Its forward gives each row a block of 256 threads and walks the row twice:
// once to sum the squares, and once more to normalise, loading x from global memory again. Make it
// read x once: keep each thread's share of the row in registers between the two steps.
// exercises/05_rmsnorm_one_read/README.md has the why and the hints; check your copy with:
//
//     python -m workbench exercise check 5 path/to/your_copy.cu
//
// The backward (looped.cuh, kernels/rmsnorm/ on the include path) is given: leave it as it is.
#include "looped.cuh"

namespace {

constexpr int kThreads = 256;

// One block per row (grid-stride over the rows). V elements per access: 16 bytes' worth (8 halves
// or 4 floats) where the row length and the pointers allow it, else 1.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                           T* __restrict__ y, int64_t rows, int64_t h, float eps) {
  __shared__ float partials[kThreads / 32];
  const int64_t nv = h / V;  // accesses per row
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * h;
    // Step 1: this thread's sum of squares, then the block's (wb_block_sum.cuh: every thread gets it).
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
      const WbVec<T, V> xv = wb_load<T, V>(xr + i * V);
#pragma unroll
      for (int j = 0; j < V; ++j) ss += wb_to_acc(xv.v[j]) * wb_to_acc(xv.v[j]);
    }
    const float rstd = rsqrtf(wb_reduce::block_allsum(ss, partials) / static_cast<float>(h) + eps);
    // Step 2: normalise. TODO: this loads x from global memory a second time; use the values
    // step 1 already loaded instead (README.md: keep them in registers).
    for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
      const WbVec<T, V> xv = wb_load<T, V>(xr + i * V), wv = wb_load<T, V>(w + i * V);
      WbVec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = wb_from_acc<T>(wb_to_acc(xv.v[j]) * rstd * wb_to_acc(wv.v[j]));
      wb_store<T, V>(y + row * h + i * V, out);
    }
  }
}

constexpr unsigned kDtypes = WB_F32 | WB_F16 | WB_BF16;

int forward(const WbRmsnormForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const T *x = static_cast<const T*>(a->x), *w = static_cast<const T*>(a->weight);
    T* y = static_cast<T*>(a->y);
    const auto stream = static_cast<cudaStream_t>(l->stream);
    if (wb_row_tiles::vector_width<T, V>(a->h, {x, w, y}) == V)
      forward_kernel<T, V><<<rmsnorm::grid_cap(a->rows), kThreads, 0, stream>>>(x, w, y, a->rows, a->h, a->eps);
    else
      forward_kernel<T, 1><<<rmsnorm::grid_cap(a->rows), kThreads, 0, stream>>>(x, w, y, a->rows, a->h, a->eps);
    return wb_launch_status();
  });
}

// Given: the backward (dx per row, dweight by column tiles in a fixed order) and its scratch.
int backward(const WbRmsnormBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) { return rmsnorm::looped_backward<typename decltype(tag)::type>(a, l); });
}

size_t workspace_bytes(int64_t rows, int64_t h, int, const WbLaunch* l) { return rmsnorm::looped_workspace_bytes(rows, h, l); }

const WbRmsnormLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(rmsnorm, WB_DEVICE_CUDA, WB_F32 | WB_F16 | WB_BF16,
                  "exercise 05 starter: block per row, x read twice in the forward", launchers, wb_cuda_status_string)

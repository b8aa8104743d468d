// scalar: the textbook rung. A block of 256 threads per row, one element per access: each thread
// sums the squares of every 256th element, a shared-memory tree adds the 256 partial sums, and a
// second sweep over the row (x read again) writes y = x * rstd * weight. Every dtype, float64
// included (so gradcheck is a true float64 gradcheck), with sums in float (double for float64).
// Backward: a block per row sums x^2 and dy * weight * x (two trees), writes dx and saves rstd;
// then dweight = the column sums of dy * x * rstd by column tiles over row slices, partial sums
// added in a fixed order (dweight.cuh): deterministic. It reads x and dy twice and x a third time.
// Predicted: x is read twice in the forward (the second read mostly from L2 for rows of a few KB),
// and one element per access leaves most of each 32-byte sector request's width unused for bf16:
// ~60-70% of the copy bandwidth.
// Measured (results/gpu/d20fc18, H100, 8 x 4096 x 4096 bf16): fwd 0.2066 ms, 86.4% of the copy
// rate, 0.86x torch.compile: above the prediction, because the second read of x hits in L2 (a row
// is 8 KiB; Nsight Compute, tests/fixtures/ncu: its loads ask for 3.0x the bytes of x, DRAM
// delivers x once). bwd 0.5749 ms (46.6% of its floor), fwd+bwd 0.7901 ms, 0.64x torch.compile.
#include "dweight.cuh"
#include "rmsnorm.h"

namespace {

constexpr int kThreads = 256;
constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;

// The sum of v over the block, in every thread: a shared-memory tree, halving the active threads
// each step (the reduction ladder's "sequential addressing" rung).
template <typename A>
__device__ A tree_sum(A v, A* s) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  const A total = s[0];
  __syncthreads();  // everyone has read s[0] before the next call overwrites it
  return total;
}

template <typename T, typename A = wb_acc_t<T>>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                           T* __restrict__ y, int64_t rows, int64_t h, A eps) {
  __shared__ A s[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * h;
    A ss = A(0);
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const A v = wb_to_acc(xr[c]);
      ss += v * v;
    }
    const A rstd = A(1) / sqrt(tree_sum(ss, s) / static_cast<A>(h) + eps);
    for (int64_t c = threadIdx.x; c < h; c += kThreads)
      y[r * h + c] = wb_from_acc<T>(wb_to_acc(xr[c]) * rstd * wb_to_acc(w[c]));
  }
}

template <typename T, typename A = wb_acc_t<T>>
__global__ void __launch_bounds__(kThreads) backward_rows_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                                 const T* __restrict__ w, T* __restrict__ dx,
                                                                 A* __restrict__ rstd_out, int64_t rows, int64_t h,
                                                                 A eps) {
  __shared__ A s[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * h, *dyr = dy + r * h;
    A ss = A(0), gx = A(0);
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const A v = wb_to_acc(xr[c]);
      ss += v * v;
      gx += wb_to_acc(dyr[c]) * wb_to_acc(w[c]) * v;
    }
    ss = tree_sum(ss, s);
    gx = tree_sum(gx, s);
    const A rstd = A(1) / sqrt(ss / static_cast<A>(h) + eps);
    const A coef = rstd * rstd * rstd * gx / static_cast<A>(h);
    for (int64_t c = threadIdx.x; c < h; c += kThreads)
      dx[r * h + c] = wb_from_acc<T>(rstd * wb_to_acc(dyr[c]) * wb_to_acc(w[c]) - wb_to_acc(xr[c]) * coef);
    if (threadIdx.x == 0) rstd_out[r] = rstd;
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < (1 << 30) ? rows : (1 << 30)); }

int forward(const WbRmsnormForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    forward_kernel<T><<<row_blocks(a->rows), kThreads, 0, static_cast<cudaStream_t>(l->stream)>>>(
        static_cast<const T*>(a->x), static_cast<const T*>(a->weight), static_cast<T*>(a->y), a->rows, a->h,
        static_cast<A>(a->eps));
    return wb_launch_status();
  });
}

int backward(const WbRmsnormBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    const T *dy = static_cast<const T*>(a->dy), *x = static_cast<const T*>(a->x);
    backward_rows_kernel<T><<<row_blocks(a->rows), kThreads, 0, static_cast<cudaStream_t>(l->stream)>>>(
        dy, x, static_cast<const T*>(a->weight), static_cast<T*>(a->dx), static_cast<A*>(a->workspace), a->rows,
        a->h, static_cast<A>(a->eps));
    const int status = wb_launch_status();
    if (status != WB_OK) return status;
    return rmsnorm::dweight_from_rstd<T, A>(dy, x, static_cast<T*>(a->dweight), a->workspace, a->rows, a->h, l);
  });
}

size_t workspace_bytes(int64_t rows, int64_t h, int dtype, const WbLaunch* l) {
  size_t bytes = 0;
  wb_dispatch_dtype<kDtypes>(dtype, [&](auto tag) {
    bytes = rmsnorm::dweight_workspace_bytes<wb_acc_t<typename decltype(tag)::type>>(rows, h, l->num_sms);
    return WB_OK;
  });
  return bytes;
}

const WbRmsnormLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(rmsnorm, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "block of 256 threads per row, shared-memory tree sums, one element per access; x read "
                  "twice; backward saves rstd and sums dweight by column tiles (fixed order)",
                  launchers, wb_cuda_status_string)

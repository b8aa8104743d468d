// vec_grid_stride: rung 6 (Harris's reduce6, "many elements per thread", with 16-byte loads). What
// changes over warp_shuffle: a thread no longer loads two values; it walks its row in a grid-stride
// loop, V values (16 bytes) per load, summing in a register, and the block meets once at the end
// (block_sum.cuh: shuffles in each warp, then across the 8 warps). A row gets just enough blocks
// that each thread makes about 16 loads; with several blocks per row, one more pass of the same
// kernel adds their partials in a fixed order. The grid depends on n alone, never on the device,
// so the order of the additions, and the result's bits, are the same on any GPU.
// Route: rows whose length is not a multiple of V, or an x not 16-byte aligned (a storage offset),
// take the same kernel with one value per load.
// Predicted: the tree is now a negligible share of the time, so the bandwidth: ~3-5x rung 5,
// within 10% of torch.sum.
// Measured (results/gpu/5d706d0, H100, float32): 0.350 ms at 2^28, 1.47x warp_shuffle (1.51x at 16384 x
// 16384; bfloat16 2.75-2.91x, 8 values per load): 102-103% of the copy bandwidth, 1.01x torch.sum.
// Its miss: short rows. At 65536 x 1024 each 256-thread block has one load per thread and meets
// at a barrier: 86% in float32, 41% in bfloat16.
#include "block_sum.cuh"
#include "variant.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kLoadsPerThread = 16;     // per pass over a row, the grid-stride loop's trip count
constexpr int64_t kMaxBlocksPerRow = 4096;  // caps the partials (a 2^28-value float row: 64 loads per thread)

template <typename T> constexpr int kWidth = 16 / sizeof(T);  // values per 16-byte load

// Blocks per row for a row of `units` loads: a function of n only (see the opening comment).
int64_t blocks_per_row(int64_t units) {
  const int64_t b = wb_ceil_div(units, kThreads * kLoadsPerThread);
  return b < kMaxBlocksPerRow ? b : kMaxBlocksPerRow;
}

// out[row * blocks_per_row + b] = the sum of the row's values that block b's threads visit.
template <typename In, typename Out, int V>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t n,
                                                          int64_t blocks_per_row) {
  using A = wb_acc_t<In>;
  const int64_t row = blockIdx.x / blocks_per_row, b = blockIdx.x % blocks_per_row;
  const In* r = x + row * n;
  const int64_t units = n / V, stride = blocks_per_row * kThreads;
  A acc = A(0);
  for (int64_t i = b * kThreads + threadIdx.x; i < units; i += stride) {
    const WbVec<In, V> v = wb_load<In, V>(r + i * V);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += wb_to_acc(v.v[j]);
  }
  acc = reduce_sum::block_sum<kThreads>(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = wb_from_acc<Out>(acc);
}

template <typename In, typename Out, int V>
void launch(const In* x, Out* out, int64_t rows, int64_t n, int64_t bpr, cudaStream_t s) {
  reduce_kernel<In, Out, V><<<static_cast<unsigned>(rows * bpr), kThreads, 0, s>>>(x, out, n, bpr);
}

template <typename T>
int forward_t(const T* x, T* y, void* workspace, int64_t rows, int64_t n, cudaStream_t s) {
  using A = wb_acc_t<T>;
  constexpr int V = kWidth<T>;
  const bool vec = n % V == 0 && wb_aligned(x, 16);
  const int64_t bpr = blocks_per_row(vec ? n / V : n);
  if (bpr == 1) {
    vec ? launch<T, T, V>(x, y, rows, n, 1, s) : launch<T, T, 1>(x, y, rows, n, 1, s);
    return wb_launch_status();
  }
  A* partial = static_cast<A*>(workspace);
  vec ? launch<T, A, V>(x, partial, rows, n, bpr, s) : launch<T, A, 1>(x, partial, rows, n, bpr, s);
  const int status = wb_launch_status();
  if (status != WB_OK) return status;
  launch<A, T, 1>(partial, y, rows, bpr, 1, s);  // bpr <= 4096 partials: one block per row
  return wb_launch_status();
}

struct GridStride {
  static constexpr bool kVectorBackward = true;
  template <typename T>
  static int forward(const T* x, T* y, void* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
    return forward_t<T>(x, y, workspace, rows, n, stream);
  }
  // Sized for the larger of the two routes (the pointer's alignment is not known yet).
  template <typename T>
  static size_t workspace_bytes(int64_t rows, int64_t n) {
    const int64_t bpr = blocks_per_row(n);  // the scalar route's count, never below the vector one
    return bpr > 1 ? static_cast<size_t>(rows * bpr) * sizeof(wb_acc_t<T>) : 0;
  }
};


}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "rung 6: many values per thread, 16-byte loads in a grid-stride loop, one block-wide "
                  "shuffle reduction per block, a fixed-order second pass; grid set by n alone; n % V != 0 or "
                  "x not 16-byte aligned -> same kernel with scalar loads",
                  reduce_sum::Variant<GridStride>::launchers, wb_cuda_status_string)

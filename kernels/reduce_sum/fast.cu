// fast: rung 7, the fastest deterministic reduce_sum here. What changes over vec_grid_stride:
//  - fixed chunks instead of a grid-stride walk: a row's 16-byte vectors are cut into chunks of
//    256 threads x L loads (L = 4, 8 or 16: the fewest that hold a short row; 16, or 8 for 16-bit
//    values, for rows of 1024 chunks or more, else 4), each thread's loads issued in groups before
//    their adds, and a chunk's sum is one block reduction. The chunking depends on n alone, so a
//    value's place in the order of additions is the same for any grid, and there is simply one
//    block per chunk (the hardware balances them; no tail wave of a grid-stride loop). A row of one
//    chunk (up to 16384 floats, 16384 16-bit values) is summed in one pass with no partials; longer
//    rows write one float per chunk and the block that finishes a row's last chunk adds the row's
//    partials in a fixed order (no float atomics): one launch, the last block found by a per-row
//    counter that it puts back to zero, where the chunks fit one wave of blocks (a second kernel
//    does it beyond that, under CUDA graph capture, past 1024 rows or 16 streams a device).
//  - rows of at most 512 vectors (2048 floats, 4096 16-bit values) get a warp each, 8 rows per
//    block, summed by shuffles alone: no barrier and no shared memory per row.
//  - any alignment at full width: a row's values before its first 16-byte boundary and after its
//    last whole vector (fewer than V each) are added by the first chunk's threads, one per thread,
//    so offset views and odd n keep the 16-byte loads instead of a scalar route.
//  - registers read off the ptxas report: 16 loads in flight per thread took 128 registers (2
//    blocks per SM) and ran 5% behind torch.compile on 16384-wide bf16 rows; the kernels are
//    compiled for 3 blocks per SM (80 registers, no spills; the 16-bit warp path for 2).
// Predicted: at the read bandwidth in both regimes (one 2^28 row; 16384 x 16384): >= 95% of
// torch.sum, +5-10% over vec_grid_stride where its single pass or its warps apply.
// Measured (results/gpu/5d706d0, H100): float32 0.348 ms at 2^28 (1.01x torch.sum, 1.00x
// torch.compile), 0.339 ms at 16384 x 16384 (1.02x torch.sum, 1.00x compile): 1.00-1.02x
// vec_grid_stride, short of the +5-10% predicted (both already read at the copy rate there); at
// 65536 x 1024 1.18x vec_grid_stride (the warps) and 1.07x torch.sum. bfloat16: 0.179 / 0.171 ms,
// 1.03 / 1.09x torch.sum, 0.99 / 1.00x compile; 65536 x 1024 2.37x vec_grid_stride. First rung to
// last: 3.7-3.8x (float32), 7.1-7.5x (bfloat16). Below 4 MiB it trails compile (0.93-0.95x at
// 2^20 values: 8 us, launch-bound).
// One launch for rows of several chunks (issue 26): at 2^20 float32 the two launches were 7.9-8.4
// us against torch.sum's 10.0 (16771b9, 5d706d0); the partials kernel (one block reading 256
// floats) cost a launch gap and a ramp. Predicted: 2^20 float32 about 6 us (>= 1.5x torch.sum,
// the issue asks 0.9x); 2^28 (two launches still: 16384 chunks) and 16384 x 16384 (one chunk a
// row) the same kernels as before, unchanged within 2%. Measured (results/gpu/af4ed61-h100,
// small_sizes.log): 2^20 float32 7.26 us against torch.sum's 9.90 (1.36x, short of the ~6 us
// predicted: the one launch still reads with 256 blocks, a ramp of its own); 16384 x 16384 1.021x
// and 2^28 1.005x torch.sum, within 0.2% of the committed ratios.
#include <atomic>

#include "block_sum.cuh"
#include "variant.cuh"

namespace {

constexpr int kThreads = 256;
// Loads per thread per chunk (block path), at most: 16-bit values need more registers per load in
// flight (their conversions), and 16 of them spilled under the 80-register cap below.
template <typename T> constexpr int kBlockLoads = sizeof(T) == 2 ? 8 : 16;
constexpr int kWarpLoads = 16;         // loads per lane (warp path: rows of <= 32 * 16 vectors)
constexpr int64_t kMaxGrid = 1 << 20;  // beyond this many chunks, blocks take several in turn

template <typename T> constexpr int kWidth = 16 / sizeof(T);  // values per 16-byte load
// Blocks per SM the warp path is compiled for: 3 (80 registers) spilled 16-bit values; 2 does not.
template <typename T> constexpr int kWarpMinBlocks = sizeof(T) == 2 ? 2 : 3;

// A row seen as: `head` values up to its first 16-byte boundary, `vecs` whole 16-byte vectors,
// then `tail` (< V) values.
template <typename T, int V>
struct RowSplit {
  const T* row;
  int head, tail;
  int64_t vecs;

  __device__ __forceinline__ RowSplit(const T* r, int64_t n) : row(r) {
    const unsigned misaligned = static_cast<unsigned>(reinterpret_cast<uintptr_t>(r) % 16);
    const int64_t h = misaligned ? (16 - misaligned) / sizeof(T) : 0;
    head = static_cast<int>(h < n ? h : n);
    vecs = (n - head) / V;
    tail = static_cast<int>(n - head - vecs * V);
  }
  __device__ __forceinline__ const WbVec<T, V>* body() const {
    return reinterpret_cast<const WbVec<T, V>*>(row + head);
  }
  // The head and tail values, at most one of each per thread.
  __device__ __forceinline__ wb_acc_t<T> edges(int lane) const {
    wb_acc_t<T> a = 0;
    if (lane < head) a += wb_to_acc(row[lane]);
    if (lane < tail) a += wb_to_acc(row[head + vecs * V + lane]);
    return a;
  }
};

// This lane's share of chunk c: vectors c * TEAM * LOADS + lane + k * TEAM, k = 0..LOADS-1. Value j
// of each vector goes to accumulator j % A (k order; A = V for float32 and float64), and the A sums
// are added pairwise at the end: shorter chains of smaller running sums. (At 2^28 uniform values
// the float32 result is one ulp of the sum, 16, from the exact one either way: results/gpu/5d706d0
// reduce_sum_accuracy.json; torch.sum's rounds to the nearest float.) 16-bit values keep one chain
// (A = 1): the 16-bit result's rounding dominates, and more accumulators spilled.
// Loads go out in groups (8 at a time in a full chunk of 32- or 64-bit values, 4 otherwise, those
// past the row's end predicated off), each group issued before its first add: enough bytes in
// flight per thread within the register budget below.
template <int TEAM, int LOADS, typename T, int V>
__device__ __forceinline__ wb_acc_t<T> chunk_sum(const WbVec<T, V>* __restrict__ body, int64_t vecs, int64_t c,
                                                 int lane) {
  const int64_t first = c * TEAM * LOADS + lane;
  constexpr int A = sizeof(T) == 2 ? 1 : V;
  wb_acc_t<T> acc[A];
#pragma unroll
  for (int a = 0; a < A; ++a) acc[a] = 0;
  if ((c + 1) * TEAM * LOADS <= vecs) {
    constexpr int kGroup = LOADS < 8 || sizeof(T) == 2 ? 4 : 8;  // 16-bit: more registers per value in flight
#pragma unroll
    for (int k0 = 0; k0 < LOADS; k0 += kGroup) {
      WbVec<T, V> v[kGroup];
#pragma unroll
      for (int k = 0; k < kGroup; ++k) v[k] = body[first + (k0 + k) * TEAM];
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j % A] += wb_to_acc(v[k].v[j]);
    }
  } else {
#pragma unroll
    for (int k0 = 0; k0 < LOADS; k0 += 4) {
      WbVec<T, V> v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (first + (k0 + k) * TEAM < vecs) v[k] = body[first + (k0 + k) * TEAM];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (first + (k0 + k) * TEAM < vecs)
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j % A] += wb_to_acc(v[k].v[j]);
    }
  }
#pragma unroll
  for (int width = A / 2; width > 0; width /= 2)
#pragma unroll
    for (int a = 0; a < width; ++a) acc[a] += acc[a + width];
  return acc[0];
}

// A row's chunk partials added in a fixed order, valid in thread 0: four accumulators per thread
// (partial i into i / kThreads % 4), added pairwise, then the block reduction. Read past L1
// (__ldcg): in the one-launch path other blocks wrote them moments ago.
template <typename A>
__device__ __forceinline__ A row_partials_sum(const A* __restrict__ p, int64_t chunks_per_row) {
  A acc[4] = {0, 0, 0, 0};
  int64_t i = threadIdx.x;
  for (; i + 3 * kThreads < chunks_per_row; i += 4 * kThreads)
#pragma unroll
    for (int a = 0; a < 4; ++a) acc[a] += __ldcg(p + i + a * kThreads);
#pragma unroll
  for (int a = 0; a < 4; ++a)  // the last round, predicated (a dynamic acc[a] would live in local memory)
    if (i + a * kThreads < chunks_per_row) acc[a] += __ldcg(p + i + a * kThreads);
  return reduce_sum::block_sum<kThreads>((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

// One launch for rows of several chunks (threadFenceReduction, CUDA samples): each chunk's block
// writes its partial, and the block that finishes a row's last chunk adds the row's partials
// (row_partials_sum, the same order as partials_kernel: the bits do not depend on which block is
// last). A row's count of finished chunks lives in this module's device memory, zero at load and
// put back to zero by the row's last block, so no launch clears it. A stream has a region of
// kCountedRows counters of its own (calls on one stream run in turn; calls on two streams never
// share a counter): one_launch_region() below.
constexpr int kCounterRegions = 16;
constexpr int64_t kCountedRows = 1024;
__device__ unsigned int g_chunks_done[kCounterRegions * kCountedRows];

// At least 3 blocks per SM (80 registers): a row of one chunk is one block's whole life, so
// resident blocks, not loads per thread, keep the memory busy (at 16384 bf16 values a row, 128
// registers and 2 blocks per SM ran 5% behind torch.compile; 64 registers spilled).
// region: the counters of the one-launch path, or -1 (partials_kernel adds the partials).
constexpr int kChunkMinBlocks = 3;
template <typename T, int V, int LOADS>
__global__ void __launch_bounds__(kThreads, kChunkMinBlocks) chunk_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                         wb_acc_t<T>* __restrict__ partial, int64_t n,
                                                         int64_t chunks_per_row, int64_t chunks, int region) {
  __shared__ bool row_done;
  for (int64_t g = blockIdx.x; g < chunks; g += gridDim.x) {
    const int64_t row = g / chunks_per_row, c = g - row * chunks_per_row;
    const RowSplit<T, V> s(x + row * n, n);
    wb_acc_t<T> acc = chunk_sum<kThreads, LOADS>(s.body(), s.vecs, c, threadIdx.x);
    if (c == 0) acc += s.edges(threadIdx.x);
    acc = reduce_sum::block_sum<kThreads>(acc);
    if (chunks_per_row == 1) {
      if (threadIdx.x == 0) y[row] = wb_from_acc<T>(acc);
      continue;
    }
    if (threadIdx.x == 0) partial[g] = acc;
    if (region < 0) continue;
    if (threadIdx.x == 0) {
      __threadfence();  // this partial is visible device-wide before it is counted
      unsigned int* done = &g_chunks_done[region * kCountedRows + row];
      row_done = atomicAdd(done, 1u) == static_cast<unsigned int>(chunks_per_row - 1);
      if (row_done) atomicExch(done, 0u);  // ready for the next launch on this stream
    }
    __syncthreads();  // (the next write of row_done comes after block_sum's barriers)
    if (row_done) {
      __threadfence();
      const wb_acc_t<T> sum = row_partials_sum(partial + row * chunks_per_row, chunks_per_row);
      if (threadIdx.x == 0) y[row] = wb_from_acc<T>(sum);
    }
  }
}

// The second launch where the one-launch path does not apply: y[row] = row_partials_sum.
template <typename T>
__global__ void __launch_bounds__(kThreads) partials_kernel(const wb_acc_t<T>* __restrict__ partial,
                                                            T* __restrict__ y, int64_t chunks_per_row) {
  const wb_acc_t<T> sum = row_partials_sum(partial + static_cast<int64_t>(blockIdx.x) * chunks_per_row, chunks_per_row);
  if (threadIdx.x == 0) y[blockIdx.x] = wb_from_acc<T>(sum);
}

// Warp path: a warp per row, rows of at most 32 * LOADS vectors.
template <typename T, int V, int LOADS>
__global__ void __launch_bounds__(kThreads, kWarpMinBlocks<T>) warp_rows_kernel(const T* __restrict__ x,
                                                                                T* __restrict__ y, int64_t n,
                                                                                int64_t rows) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const RowSplit<T, V> s(x + row * n, n);
    const wb_acc_t<T> acc = reduce_sum::warp_sum(chunk_sum<32, LOADS>(s.body(), s.vecs, 0, lane) + s.edges(lane));
    if (lane == 0) y[row] = wb_from_acc<T>(acc);
  }
}

template <typename T>
constexpr int64_t kWarpRowMax = int64_t{32} * kWarpLoads * kWidth<T>;

// Loads per thread in a chunk: the fewest of 4, 8, 16 (up to kBlockLoads) that hold a whole row.
// A short row in a 16-load chunk would leave most of its predicated loads idle, and their
// registers cost occupancy: 4096 floats a row ran at 68% of the copy rate that way. A row of
// several chunks takes 4 loads (16 KiB chunks, enough blocks to fill the GPU: a 2^20-float row in
// 64 KiB chunks was 64 blocks, 0.83x torch.compile) until it has 1024 chunks of kBlockLoads.
template <typename T>
int loads_per_thread(int64_t n) {
  const int64_t vecs = wb_ceil_div(n, kWidth<T>);
  if (vecs <= kThreads * 4) return 4;
  if (vecs <= kThreads * 8) return 8;
  if (vecs <= kThreads * kBlockLoads<T>) return kBlockLoads<T>;
  return vecs >= int64_t{1024} * kThreads * kBlockLoads<T> ? kBlockLoads<T> : 4;
}

template <typename T>
int64_t chunks_per_row(int64_t n) {
  return wb_ceil_div(wb_ceil_div(n, kWidth<T>), int64_t{kThreads} * loads_per_thread<T>(n));
}

// The counter region for a one-launch call on this stream, or -1 for two launches: while the stream
// is being captured into a CUDA graph (a graph may be replayed on any stream beside other work: it
// keeps no state between launches); beyond one wave of blocks (kChunkMinBlocks an SM: in later
// waves a block's fence and count would hold its slot with no loads in flight, where a second
// launch costs little beside that much data); past kCountedRows rows; or once kCounterRegions
// streams of this device have taken the regions (told apart by handle; never given back).
int one_launch_region(cudaStream_t stream, int64_t rows, int64_t chunks) {
  constexpr int kDevices = 64;
  // A region's owner: its stream's handle + 1 (the legacy default stream's handle is 0), 0 while
  // free; set once, by compare-and-swap, so two threads never take one region for two streams.
  static std::atomic<uintptr_t> owner[kDevices][kCounterRegions];
  static std::atomic<int> sms[kDevices];  // 0 until asked
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  int device = 0;
  if (rows > kCountedRows) return -1;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // the refused query's error: not left behind for the launch to report
    return -1;
  }
  if (capture != cudaStreamCaptureStatusNone || device >= kDevices) return -1;
  if (sms[device].load() == 0) {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    sms[device].store(count);
  }
  if (chunks > int64_t{kChunkMinBlocks} * sms[device].load()) return -1;
  const uintptr_t key = reinterpret_cast<uintptr_t>(stream) + 1;
  for (int r = 0; r < kCounterRegions; ++r) {
    uintptr_t seen = 0;
    if (owner[device][r].compare_exchange_strong(seen, key) || seen == key) return r;
  }
  return -1;
}

template <typename T, int LOADS>
void launch_chunks(const T* x, T* y, wb_acc_t<T>* partial, int64_t n, int64_t per_row, int64_t chunks, int region,
                   cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(chunks < kMaxGrid ? chunks : kMaxGrid);
  chunk_kernel<T, kWidth<T>, LOADS><<<grid, kThreads, 0, s>>>(x, y, partial, n, per_row, chunks, region);
}

template <typename T>
int forward_t(const T* x, T* y, void* workspace, int64_t rows, int64_t n, cudaStream_t s) {
  constexpr int V = kWidth<T>;
  if (n <= kWarpRowMax<T>) {  // as few loads per lane as hold the row: idle predicated loads cost registers
    const int64_t blocks = wb_ceil_div(rows, kThreads / 32), vecs = wb_ceil_div(n, V);
    const unsigned grid = static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
    if (vecs <= 32 * 4)
      warp_rows_kernel<T, V, 4><<<grid, kThreads, 0, s>>>(x, y, n, rows);
    else if (vecs <= 32 * 8)
      warp_rows_kernel<T, V, 8><<<grid, kThreads, 0, s>>>(x, y, n, rows);
    else
      warp_rows_kernel<T, V, kWarpLoads><<<grid, kThreads, 0, s>>>(x, y, n, rows);
    return wb_launch_status();
  }
  const int64_t per_row = chunks_per_row<T>(n), chunks = rows * per_row;
  const int region = per_row > 1 ? one_launch_region(s, rows, chunks) : -1;
  auto* partial = static_cast<wb_acc_t<T>*>(workspace);
  switch (loads_per_thread<T>(n)) {
    case 4: launch_chunks<T, 4>(x, y, partial, n, per_row, chunks, region, s); break;
    case 8: launch_chunks<T, 8>(x, y, partial, n, per_row, chunks, region, s); break;
    default: launch_chunks<T, kBlockLoads<T>>(x, y, partial, n, per_row, chunks, region, s);
  }
  const int status = wb_launch_status();
  if (status != WB_OK || per_row == 1 || region >= 0) return status;
  partials_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(partial, y, per_row);
  return wb_launch_status();
}

struct Fast {
  static constexpr bool kVectorBackward = true;
  template <typename T>
  static int forward(const T* x, T* y, void* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
    return forward_t<T>(x, y, workspace, rows, n, stream);
  }
  template <typename T>
  static size_t workspace_bytes(int64_t rows, int64_t n) {
    const int64_t per_row = n <= kWarpRowMax<T> ? 1 : chunks_per_row<T>(n);
    return per_row > 1 ? static_cast<size_t>(rows * per_row) * sizeof(wb_acc_t<T>) : 0;
  }
};


}  // namespace

WB_EXPORT_VARIANT(reduce_sum, WB_DEVICE_CUDA, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "rung 7: fixed chunks of 256 threads x 4-16 loads of 16 bytes, one pass for rows that fit a "
                  "chunk, a warp per row for rows of <= 512 vectors, a fixed-order second pass; the order of "
                  "additions depends on n and alignment only; unaligned heads and tails added by the first chunk",
                  reduce_sum::Variant<Fast>::launchers, wb_cuda_status_string)

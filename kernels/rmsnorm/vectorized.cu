// vectorized: what it changes over scalar: x is read once. Each thread loads its share of the row
// as 16-byte vectors into registers (8 bf16/fp16 or 4 floats per access), the row's sum of squares
// is reduced across the row's threads by shuffles (wb_block_sum.cuh), and y is computed from the
// registers and stored as 16-byte vectors: one read of x, one write of y, the byte floor. Short rows
// (up to 128 vectors: h <= 1024 bf16, 512 fp32) take a warp each, 8 rows per block, no barrier;
// longer rows a block of up to 512 threads each, every thread holding 4 vectors (8 past 2048
// vectors). float, half and bfloat16 from one template, float math.
// Backward, the same layout: each row's threads load x and dy once, reduce sum(x^2) and
// sum(dy * w * x) together (WbSum2: one barrier pair), write dx, and add dy * x * rstd into float
// registers for their columns. Blocks are persistent (as many as fit on the GPU, each walking
// rows grid-stride), so the weight is loaded once per block and dweight costs one float partial
// row per block (warps of a block combine theirs in shared memory first); a fixed-order pass adds
// the partials (wb_row_tiles::sum_slices). Deterministic; no atomics.
// rstd is recomputed, not saved: the backward holds the whole row of x anyway, so it costs one
// more sum in the reduction the backward does regardless, and no bytes; saving it would add an
// output to the op (rows * 4 bytes written and read, 0.05% at 8 x 4096 x 4096) for nothing.
// The backward keeps at most 4 vectors per thread (x, dy, weight and float dweight sums for each;
// 8 spilled) and, at 1-2 vectors, loads the next row's x and dy while this row is reduced: rows
// up to 2048 vectors (h <= 16384 bf16, 8192 float32) stay in registers.
// Route: rows longer than that (4096 vectors in the forward: h > 32768 bf16), or a row length that
// is not a multiple of the vector width, or a pointer not 16-byte aligned (an offset view): the
// looped route of looped.cuh (a block per row, x read twice, the backward saves rstd for the
// column-tile dweight of dweight.cuh). Correct for any view; not the fast path.
// Predicted: forward at ~95-100% of the copy bandwidth (one read, one write, like bias_gelu's vec4),
// 1.5x+ scalar in bf16; fwd+bwd near its floor (read x, write y; read dy and x, write dx).
// Measured (results/gpu/d20fc18, H100, 8 x 4096 x 4096 bf16; % of the copy rate for the bytes a
// direction must move): fwd 0.1803 ms, 99.0%, 1.15x scalar, 0.99x torch.compile; bwd 0.2752 ms,
// 97.3%, 2.09x scalar, 1.16x torch.compile; fwd+bwd 0.4643 ms, 96.1%, 1.70x scalar, 1.08x
// torch.compile. The forward missed 1.5x scalar because scalar's second read of x comes from L2.
// Prefetching the next row took the backward from 0.319 to 0.276 ms (side by side, same run).
// Over h = 512 ... 16384 bf16: fwd 96.6-100.3%, fwd+bwd 92.1-96.2% (1.03-1.36x torch.compile).
// float32 rows of 16384 take the looped route in the backward: 0.71x torch.compile there.
#include "looped.cuh"
#include "rmsnorm.h"
#include "wb_row.cuh"

namespace {

// The row groups (a warp or a block per row, their sums), the layouts (wb_row::plan_for, with_plan)
// and the row loop are the row family's (wb_row.cuh); the kernels are rmsnorm's own: the weight,
// and dweight's column sums. (Host functions are named in full: the NVRTC tier's device view has
// no host function for a using-declaration to name.)
using wb_row::Fit;
using wb_row::grid_cap;
using wb_row::Group;
using wb_row::kMaxRowThreads;
using wb_row::kWarpRowsThreads;
using wb_row::Plan;
using wb_row::vec_width;

constexpr unsigned kDtypes = WB_F32 | WB_F16 | WB_BF16;
constexpr bool kPrefetch = true;          // backward: load row r + 1 while reducing row r

// ---------------------------------------------------------------- the row in registers

template <bool WARP>
__host__ __device__ constexpr int max_threads() { return WARP ? kWarpRowsThreads : kMaxRowThreads; }

template <typename T, int NPT, bool WARP>
__global__ void __launch_bounds__(max_threads<WARP>()) forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                       T* __restrict__ y, int64_t rows, int nv, float inv_h,
                                                       float eps) {
  constexpr int V = vec_width<T>();
  using G = Group<WARP>;
  const int lane = G::lane(), size = G::size();
  for (int64_t row = G::first_row(); row < rows; row += G::row_stride()) {
    const T* xr = x + row * nv * V;
    WbVec<T, V> xv[NPT];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv) {
        xv[i] = wb_load<T, V>(xr + idx * V);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = wb_to_acc(xv[i].v[j]);
          ss += v * v;
        }
      }
    }
    const float rstd = rsqrtf(G::allsum(ss) * inv_h + eps);
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv) {
        const WbVec<T, V> wv = wb_load<T, V>(w + idx * V);
        WbVec<T, V> out;
#pragma unroll
        for (int j = 0; j < V; ++j) out.v[j] = wb_from_acc<T>(wb_to_acc(xv[i].v[j]) * rstd * wb_to_acc(wv.v[j]));
        wb_store<T, V>(y + row * nv * V + idx * V, out);
      }
    }
  }
}

// Persistent: each row group walks rows gridDim.x * per_block() apart; dw holds its columns'
// sum of dy * x * rstd. The block's partial row goes to partial[blockIdx.x * h ...].
template <typename T, int NPT, bool WARP>
__global__ void __launch_bounds__(max_threads<WARP>(), 1) backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                        const T* __restrict__ w, T* __restrict__ dx,
                                                        float* __restrict__ partial, int64_t rows, int nv,
                                                        float inv_h, float eps) {
  constexpr int V = vec_width<T>();
  using G = Group<WARP>;
  extern __shared__ float warp_sums[];  // WARP: per_block() rows of h floats, to combine the warps' dw
  const int lane = G::lane(), size = G::size();
  const int64_t h = static_cast<int64_t>(nv) * V;
  WbVec<T, V> wv[NPT];
  float dw[NPT][V];
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int idx = lane + i * size;
    if (idx < nv) wv[i] = wb_load<T, V>(w + idx * V);
#pragma unroll
    for (int j = 0; j < V; ++j) dw[i][j] = 0.f;
  }
  // The next row's x and dy are loaded before this row's sums are reduced, so that a row's
  // loads are in flight during the previous row's barrier and arithmetic.
  auto load_row = [&](int64_t row, WbVec<T, V>* xv, WbVec<T, V>* gv) {
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv) {
        xv[i] = wb_load<T, V>(x + row * h + idx * V);
        gv[i] = wb_load<T, V>(dy + row * h + idx * V);
      }
    }
  };
  const int64_t stride = G::row_stride();
  int64_t row = G::first_row();
  WbVec<T, V> xv[NPT], gv[NPT];
  constexpr bool prefetch = kPrefetch && NPT <= 2;  // 4 vectors of x and dy twice over would spill
  if (prefetch && row < rows) load_row(row, xv, gv);
  for (; row < rows; row += stride) {
    WbVec<T, V> xn[NPT], gn[NPT];
    if (!prefetch) load_row(row, xv, gv);
    else if (row + stride < rows) load_row(row + stride, xn, gn);
    WbSum2<float> s{0.f, 0.f};  // sum x^2, sum dy * w * x
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xf = wb_to_acc(xv[i].v[j]);
          s.a += xf * xf;
          s.b += wb_to_acc(gv[i].v[j]) * wb_to_acc(wv[i].v[j]) * xf;
        }
      }
    }
    s = G::allsum(s);
    const float rstd = rsqrtf(s.a * inv_h + eps);
    const float coef = rstd * rstd * rstd * s.b * inv_h;
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv) {
        WbVec<T, V> out;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xf = wb_to_acc(xv[i].v[j]), g = wb_to_acc(gv[i].v[j]);
          out.v[j] = wb_from_acc<T>(rstd * g * wb_to_acc(wv[i].v[j]) - xf * coef);
          dw[i][j] += g * xf * rstd;
        }
        wb_store<T, V>(dx + row * h + idx * V, out);
      }
    }
    if (prefetch)
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        xv[i] = xn[i];
        gv[i] = gn[i];
      }
  }
  float* out = partial + static_cast<int64_t>(blockIdx.x) * h;
  if constexpr (WARP) {  // the block's warps add their dw in warp order through shared memory
    float* mine = warp_sums + static_cast<int64_t>(G::index()) * h;
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv)
#pragma unroll
        for (int j = 0; j < V; ++j) mine[idx * V + j] = dw[i][j];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      float total = warp_sums[c];
      for (int k = 1; k < G::per_block(); ++k) total += warp_sums[k * h + c];
      out[c] = total;
    }
  } else {
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int idx = lane + i * size;
      if (idx < nv)
#pragma unroll
        for (int j = 0; j < V; ++j) out[idx * V + j] = dw[i][j];
    }
  }
}

// ---------------------------------------------------------------- launch plans

// The register route's layouts (wb_row::plan_for: a warp per row up to 128 vectors, then the first
// fit that covers the row; none: the looped route).
// Forward: 4 vectors per thread, 8 past 2048 vectors (h > 16384 bf16).
constexpr Fit kForwardFits[] = {{4, kMaxRowThreads}, {8, kMaxRowThreads}};
// Backward: x, dy, weight and float dweight sums per vector, and up to 2 vectors prefetched: 1 or
// 2 vectors per thread in blocks of up to 256 threads (up to 512 vectors: h <= 4096 bf16), then
// 2 per thread up to 512 threads, then 4 (no prefetch; 8 would spill).
constexpr Fit kBackwardFits[] = {{1, 256}, {2, 256}, {2, kMaxRowThreads}, {4, kMaxRowThreads}};
constexpr int kForwardMinNpt = 4, kForwardMaxNpt = 8, kBackwardMaxNpt = 4;  // the fits' NPTs: the kernels compiled

template <typename T, size_t N>
bool vector_route(int64_t h, const Fit (&fits)[N], std::initializer_list<const void*> ptrs) {
  constexpr int V = vec_width<T>();
  return wb_row_tiles::vector_width<T, V>(h, ptrs) == V && wb_row::plan_for(h / V, fits).threads;
}

template <typename T>
int forward_t(const WbRmsnormForward* a, const WbLaunch* l) {
  constexpr int V = vec_width<T>();
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T *x = static_cast<const T*>(a->x), *w = static_cast<const T*>(a->weight);
  T* y = static_cast<T*>(a->y);
  const float inv_h = 1.f / static_cast<float>(a->h), eps = static_cast<float>(a->eps);
  if (vector_route<T>(a->h, kForwardFits, {x, w, y})) {
    const int64_t nv = a->h / V;
    const Plan p = wb_row::plan_for(nv, kForwardFits);
    const int64_t blocks = wb_row::blocks_for(p, a->rows);
    wb_row::with_plan<kForwardMaxNpt, kForwardMinNpt>(p, [&](auto npt, auto warp) {
      forward_kernel<T, decltype(npt)::value, decltype(warp)::value><<<grid_cap(blocks), p.threads, 0, stream>>>(
          x, w, y, a->rows, static_cast<int>(nv), inv_h, eps);
      return 0;
    });
    return wb_launch_status();
  }
  return rmsnorm::looped_forward<T>(a, l);
}

// The persistent backward's grid: the blocks that fit on the GPU at once, no more than the rows
// need; *shared_bytes: the warps' dweight rows (warp per row).
template <typename T>
int64_t backward_blocks(const Plan& p, int64_t rows, int64_t h, int num_sms, size_t* shared_bytes) {
  *shared_bytes = p.warp ? static_cast<size_t>(p.threads / 32) * h * sizeof(float) : 0;
  int per_sm = 0;
  const cudaError_t err = wb_row::with_plan<kBackwardMaxNpt>(p, [&](auto npt, auto warp) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, backward_kernel<T, decltype(npt)::value, decltype(warp)::value>, p.threads, *shared_bytes);
  });
  if (err != cudaSuccess || per_sm < 1) per_sm = 1;
  const int64_t resident = static_cast<int64_t>(per_sm) * (num_sms > 0 ? num_sms : 1);
  const int64_t needed = wb_row::blocks_for(p, rows);
  return needed < resident ? needed : resident;
}

template <typename T>
int backward_t(const WbRmsnormBackward* a, const WbLaunch* l) {
  constexpr int V = vec_width<T>();
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const T *dy = static_cast<const T*>(a->dy), *x = static_cast<const T*>(a->x), *w = static_cast<const T*>(a->weight);
  T* dx = static_cast<T*>(a->dx);
  const float inv_h = 1.f / static_cast<float>(a->h), eps = static_cast<float>(a->eps);
  if (vector_route<T>(a->h, kBackwardFits, {dy, x, w, dx, a->dweight})) {
    const Plan p = wb_row::plan_for(a->h / V, kBackwardFits);
    size_t shared_bytes = 0;
    const int64_t blocks = backward_blocks<T>(p, a->rows, a->h, l->num_sms, &shared_bytes);
    float* partial = static_cast<float*>(a->workspace);
    wb_row::with_plan<kBackwardMaxNpt>(p, [&](auto npt, auto warp) {
      backward_kernel<T, decltype(npt)::value, decltype(warp)::value>
          <<<static_cast<unsigned>(blocks), p.threads, shared_bytes, stream>>>(
              dy, x, w, dx, partial, a->rows, static_cast<int>(a->h / V), inv_h, eps);
      return 0;
    });
    const int status = wb_launch_status();
    if (status != WB_OK) return status;
    return wb_row_tiles::sum_slices<T>(partial, static_cast<T*>(a->dweight), blocks, a->h, stream);
  }
  return rmsnorm::looped_backward<T>(a, l);
}

int forward(const WbRmsnormForward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) { return forward_t<typename decltype(tag)::type>(a, l); });
}

int backward(const WbRmsnormBackward* a, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) { return backward_t<typename decltype(tag)::type>(a, l); });
}

// Sized before the pointers are known, so for whichever route runs.
size_t workspace_bytes(int64_t rows, int64_t h, int dtype, const WbLaunch* l) {
  size_t bytes = 0;
  wb_dispatch_dtype<kDtypes>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bytes = rmsnorm::looped_workspace_bytes(rows, h, l);
    const Plan p = wb_row::plan_for(h / vec_width<T>(), kBackwardFits);
    if (h % vec_width<T>() == 0 && p.threads) {
      size_t shared_bytes = 0;
      const size_t regs = static_cast<size_t>(backward_blocks<T>(p, rows, h, l->num_sms, &shared_bytes) * h) * sizeof(float);
      bytes = regs > bytes ? regs : bytes;
    }
    return WB_OK;
  });
  return bytes;
}

const WbRmsnormLaunchers launchers = {forward, backward, workspace_bytes};

}  // namespace

WB_EXPORT_VARIANT(rmsnorm, WB_DEVICE_CUDA, WB_F32 | WB_F16 | WB_BF16,
                  "16-byte vectors, the row kept in registers (x read once): a warp per row up to 128 "
                  "vectors, a block per row up to 8192; persistent backward with float dweight partials "
                  "per block, fixed-order sum; other rows and unaligned views: a looped route",
                  launchers, wb_cuda_status_string)

// The row family's CUDA kernels and launchers (the contract: wb_row.h). An op's variant file is its
// launcher table and its WB_EXPORT_VARIANT:
//
//   const WbRowLaunchers launchers = wb_row::vector_launchers<WB_F32, MyOpForward, MyOpBackward>();
//
// One kernel serves every step; a row is laid out on threads by the plan for its length:
//  - a warp per row (8 rows a block, no barrier) up to 128 16-byte vectors (1024 bf16, 512 floats),
//    a block per row past that, with 4 vectors a thread up to 512 threads (16384 bf16, 8192 floats)
//    and 8 up to 4096 vectors: each thread loads its vectors of every stream the step reads once,
//    into registers, all before its first arithmetic; the step's reductions and its write run on
//    those registers, so a row is read once and written once (the byte floor);
//  - longer rows, a row length that is not a multiple of the vector width, or a pointer not 16-byte
//    aligned (an offset view): the streamed route, a block of 256 per row reading its vectors again
//    for each reduction and for the write (the second and later reads mostly from L2); 1 element
//    per access where the width or a pointer does not allow 16 bytes.
// scalar_launchers: the streamed route with 1 element per access, always (the teaching baseline).
// Reductions are in float (double for double), each thread's elements in order and then across the
// row's threads in a fixed tree (wb_block_sum.cuh): the same inputs give the same bits. Blocks walk
// rows grid-stride (the grid is capped at 2^30 blocks).
#pragma once

#include <stdint.h>

#include <type_traits>

#include "wb_block_sum.cuh"
#include "wb_row.h"
#include "wb_vec.cuh"

namespace wb_row {

constexpr int kWarpRowsThreads = 256;  // a warp per row: 8 rows a block
constexpr int kMaxWarpVecs = 128;      // rows of up to 32 lanes x 4 vectors take a warp
constexpr int kMaxRowThreads = 512;    // a block per row: up to 128 registers a thread
constexpr int kStreamThreads = 256;    // the streamed route: a block per row, any length

template <typename T>
__host__ __device__ constexpr int vec_width() { return 16 / static_cast<int>(sizeof(T)); }

// Host and device, so that a header's using-declaration of it survives the NVRTC tier's device view.
__host__ __device__ constexpr unsigned grid_cap(int64_t blocks) {
  return static_cast<unsigned>(blocks < (1 << 30) ? blocks : (1 << 30));
}

// Which threads share a row: a warp (WARP) or the whole block. A row group walks the rows
// first_row(), first_row() + row_stride(), ...; its reductions give every thread the same bits.
template <bool WARP>
struct Group {
  __device__ __forceinline__ static int lane() { return WARP ? threadIdx.x % 32 : threadIdx.x; }
  __device__ __forceinline__ static int size() { return WARP ? 32 : blockDim.x; }
  __device__ __forceinline__ static int per_block() { return WARP ? blockDim.x / 32 : 1; }
  __device__ __forceinline__ static int index() { return WARP ? threadIdx.x / 32 : 0; }
  __device__ __forceinline__ static int64_t first_row() {
    return static_cast<int64_t>(blockIdx.x) * per_block() + index();
  }
  __device__ __forceinline__ static int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * per_block(); }
  // op over the row's threads, in every thread of the group (wb_block_sum.cuh's fixed trees).
  template <typename A, typename Op>
  __device__ __forceinline__ static A allreduce(A v, Op op) {
    if constexpr (WARP) return wb_reduce::warp_allreduce(v, op);
    else {
      __shared__ A partials[32];
      return wb_reduce::block_allreduce(v, partials, op);
    }
  }
  template <typename A>
  __device__ __forceinline__ static A allsum(A v) { return allreduce(v, wb_reduce::Plus{}); }
  template <typename A>
  __device__ __forceinline__ static A allmax(A v) { return allreduce(v, wb_reduce::Max{}); }
};

// ---------------------------------------------------------------- the plan: a row on threads

// A warp per row (npt vectors a lane, 8 rows a block of `threads`), a block of `threads` per row
// with npt vectors each, or, threads == 0, the streamed route.
struct Plan {
  bool warp;
  int npt, threads;
};

// A block-per-row layout a direction may take: npt vectors a thread, at most max_threads threads.
struct Fit {
  int npt, max_threads;
};

// The layout for a row of nv vectors: a warp (the fewest vectors a lane that cover it) up to
// kMaxWarpVecs, else the first fit whose npt x max_threads covers it, else the streamed route.
template <size_t N>
Plan plan_for(int64_t nv, const Fit (&fits)[N]) {
  if (nv <= kMaxWarpVecs) return {true, nv <= 32 ? 1 : nv <= 64 ? 2 : 4, kWarpRowsThreads};
  for (const Fit& f : fits)
    if (nv <= static_cast<int64_t>(f.npt) * f.max_threads) {
      const int64_t threads = wb_ceil_div(nv, static_cast<int64_t>(f.npt));
      return {false, f.npt, static_cast<int>(wb_ceil_div(threads, int64_t{32}) * 32)};
    }
  return {false, 0, 0};
}

inline int64_t blocks_for(const Plan& p, int64_t rows) {
  return p.warp ? wb_ceil_div(rows, static_cast<int64_t>(p.threads / 32)) : rows;
}

// f(std::integral_constant<int, NPT>, std::bool_constant<WARP>) for the plan: a warp's NPT is 1, 2
// or 4 (plan_for's), a block's one of MIN_BLOCK_NPT...MAX_NPT among 1, 2, 4 and 8, the fits' NPTs:
// only those kernels are compiled.
template <int MAX_NPT, int MIN_BLOCK_NPT = 1, typename F>
auto with_plan(const Plan& p, F&& f) {
  using std::integral_constant;
  if (p.warp) {
    if (p.npt == 1) return f(integral_constant<int, 1>{}, std::true_type{});
    if (p.npt == 2) return f(integral_constant<int, 2>{}, std::true_type{});
    return f(integral_constant<int, 4>{}, std::true_type{});
  }
  if constexpr (MIN_BLOCK_NPT <= 1) {
    if (p.npt == 1) return f(integral_constant<int, 1>{}, std::false_type{});
  }
  if constexpr (MIN_BLOCK_NPT <= 2) {
    if (p.npt == 2) return f(integral_constant<int, 2>{}, std::false_type{});
  }
  if constexpr (MAX_NPT >= 8) {
    if (p.npt == 8) return f(integral_constant<int, 8>{}, std::false_type{});
  }
  return f(integral_constant<int, 4>{}, std::false_type{});
}

// ---------------------------------------------------------------- one row, as a step sees it

// The R streams read and W written of one step, as typed pointers (passed by value).
template <typename T, int R, int W>
struct Streams {
  const T* in[R];
  T* out[W];
};

// One row for one thread of its group. NPT > 0: the thread's vectors of the row (vector lane,
// lane + size, ...) are loaded once, into registers; NPT == 0: read again from memory for each
// reduction and the write (the streamed route).
template <typename T, int V, int NPT, bool WARP, int R, int W>
class Row {
 public:
  using Acc = wb_acc_t<T>;
  using G = Group<WARP>;

  __device__ __forceinline__ Row(const Streams<T, R, W>& s, int64_t row, int64_t n) : n_(n), nv_(n / V) {
#pragma unroll
    for (int k = 0; k < R; ++k) in_[k] = s.in[k] + row * n;
#pragma unroll
    for (int k = 0; k < W; ++k) out_[k] = s.out[k] + row * n;
    if constexpr (NPT > 0) {
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        const int64_t idx = G::lane() + i * G::size();
        if (idx < nv_) load(idx, regs_[i]);
      }
    }
  }

  __device__ __forceinline__ int64_t n() const { return n_; }  // the row's length

  // The sum over the row of f(one element's values), in every thread: f returns Acc or WbSum2<Acc>.
  template <typename F>
  __device__ __forceinline__ auto sum(F f) const {
    decltype(f(static_cast<const Acc*>(nullptr))) acc{};
    each([&](const Acc* x) { acc = acc + f(x); });
    return G::allsum(acc);
  }

  // The maximum over the row of f(one element's values), in every thread (NaN if any is NaN).
  template <typename F>
  __device__ __forceinline__ Acc max(F f) const {
    Acc acc = wb_neg_inf(Acc{});
    each([&](const Acc* x) { acc = wb_max(acc, f(x)); });
    return G::allmax(acc);
  }

  // out[k] = the W values f(in, out) computes from one element's R values, for every element.
  template <typename F>
  __device__ __forceinline__ void write(F f) const {
    visit([&](int64_t idx, const WbVec<T, V>* v) {
      WbVec<T, V> o[W];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        Acc x[R], y[W];
#pragma unroll
        for (int k = 0; k < R; ++k) x[k] = wb_to_acc(v[k].v[j]);
        f(static_cast<const Acc*>(x), y);
#pragma unroll
        for (int k = 0; k < W; ++k) o[k].v[j] = wb_from_acc<T>(y[k]);
      }
#pragma unroll
      for (int k = 0; k < W; ++k) wb_store<T, V>(out_[k] + idx * V, o[k]);
    });
  }

 private:
  __device__ __forceinline__ void load(int64_t idx, WbVec<T, V>* v) const {
#pragma unroll
    for (int k = 0; k < R; ++k) v[k] = wb_load_readonly<T, V>(in_[k] + idx * V);  // inputs are never written
  }

  // f(vector index, the R streams' vectors there) for each vector of the row this thread owns.
  template <typename F>
  __device__ __forceinline__ void visit(F f) const {
    if constexpr (NPT > 0) {
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        const int64_t idx = G::lane() + i * G::size();
        if (idx < nv_) f(idx, regs_[i]);
      }
    } else {
      for (int64_t idx = G::lane(); idx < nv_; idx += G::size()) {
        WbVec<T, V> v[R];
        load(idx, v);
        f(idx, static_cast<const WbVec<T, V>*>(v));
      }
    }
  }

  // f(one element's R values in Acc) for each element this thread owns.
  template <typename F>
  __device__ __forceinline__ void each(F f) const {
    visit([&](int64_t, const WbVec<T, V>* v) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        Acc x[R];
#pragma unroll
        for (int k = 0; k < R; ++k) x[k] = wb_to_acc(v[k].v[j]);
        f(static_cast<const Acc*>(x));
      }
    });
  }

  const T* in_[R];
  T* out_[W];
  int64_t n_, nv_;
  WbVec<T, V> regs_[NPT > 0 ? NPT : 1][R];
};

// ---------------------------------------------------------------- the kernel and its launch

template <int NPT, bool WARP>
__host__ __device__ constexpr int max_threads() {
  return NPT == 0 ? kStreamThreads : WARP ? kWarpRowsThreads : kMaxRowThreads;
}

template <typename T, int V, int NPT, bool WARP, typename S>
__global__ void __launch_bounds__(max_threads<NPT, WARP>()) row_kernel(Streams<T, S::kReads, S::kWrites> s,
                                                                       int64_t rows, int64_t n, S step) {
  using G = Group<WARP>;
  for (int64_t row = G::first_row(); row < rows; row += G::row_stride()) {
    const Row<T, V, NPT, WARP, S::kReads, S::kWrites> r(s, row, n);
    step(r);
  }
}

// Block-per-row layouts: 4 vectors a thread, then 8 (x and dy of a backward: 64 registers);
// with_plan<8, 4> below compiles these.
constexpr Fit kFits[] = {{4, kMaxRowThreads}, {8, kMaxRowThreads}};

// One step for storage type T, V elements per access where the row and every pointer allow it.
template <typename T, int V, typename S>
int launch(const WbRowArgs* p, const WbLaunch* l) {
  const auto stream = static_cast<cudaStream_t>(l->stream);
  Streams<T, S::kReads, S::kWrites> s;
  bool vector = V > 1 && p->n % V == 0;
  for (int k = 0; k < S::kReads; ++k) {
    s.in[k] = static_cast<const T*>(p->in[k]);
    vector = vector && wb_aligned(s.in[k], sizeof(T) * V);
  }
  for (int k = 0; k < S::kWrites; ++k) {
    s.out[k] = static_cast<T*>(p->out[k]);
    vector = vector && wb_aligned(s.out[k], sizeof(T) * V);
  }
  const S f = make_step<S>(*p);
  if constexpr (V > 1) {
    if (vector) {
      const Plan plan = plan_for(p->n / V, kFits);
      if (plan.threads)
        with_plan<8, 4>(plan, [&](auto npt, auto warp) {
          row_kernel<T, V, decltype(npt)::value, decltype(warp)::value, S>
              <<<grid_cap(blocks_for(plan, p->rows)), plan.threads, 0, stream>>>(s, p->rows, p->n, f);
          return 0;
        });
      else
        row_kernel<T, V, 0, false, S><<<grid_cap(p->rows), kStreamThreads, 0, stream>>>(s, p->rows, p->n, f);
      return wb_launch_status();
    }
  }
  row_kernel<T, 1, 0, false, S><<<grid_cap(p->rows), kStreamThreads, 0, stream>>>(s, p->rows, p->n, f);
  return wb_launch_status();
}

// A launcher for the dtypes in DTYPES: 16 bytes per access (V = 16 / sizeof(T)), or V = 1.
template <unsigned DTYPES, bool VECTOR, typename S>
int step(const WbRowArgs* p, const WbLaunch* l) {
  return wb_dispatch_dtype<DTYPES>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch<T, VECTOR ? vec_width<T>() : 1, S>(p, l);
  });
}

// Launcher tables: the plan above with 16-byte vectors, or the streamed route one element at a time.
template <unsigned DTYPES, typename Forward, typename Backward>
constexpr WbRowLaunchers vector_launchers() {
  return {step<DTYPES, true, Forward>, step<DTYPES, true, Backward>};
}
template <unsigned DTYPES, typename Forward, typename Backward>
constexpr WbRowLaunchers scalar_launchers() {
  return {step<DTYPES, false, Forward>, step<DTYPES, false, Backward>};
}

}  // namespace wb_row

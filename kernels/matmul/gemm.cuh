// What every CUDA matmul rung shares: the problem C = op(A) @ op(B) (matmul.h says why op = T is
// needed), the transposed-or-not addressing, which output tile a block owns, the tile loader
// (global -> shared memory, coalesced whatever the transposition, zeros past the edges), the
// output stores, the vector-route test, and the launcher table built from one rung's GEMM.
// A rung supplies
//   struct Rung {
//     static constexpr unsigned kDtypes;   // WB_F32, ...
//     template <typename T, bool TA, bool TB> static int gemm(const matmul::Gemm<T>& g, cudaStream_t s);
//   };
// and exports matmul::Variant<Rung>::launchers; gemm is instantiated for N/N (forward), N/T (da)
// and T/N (db), for any m, n, k >= 1.
#pragma once

#include <stdint.h>

#include <atomic>

#include "matmul.h"
#include "wb_vec.cuh"

namespace matmul {

// C [m, n] (row-major, ldc = n) = op(A) [m, k] @ op(B) [k, n], where
//   op(A)(i, p) = TA ? a[p * lda + i] : a[i * lda + p]
//   op(B)(p, j) = TB ? b[j * ldb + p] : b[p * ldb + j]
template <typename T>
struct Gemm {
  int64_t m, n, k;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
};

// Element (r, c) of op(X) for a row-major X with leading dimension ld: the addressing of the
// rungs that read global memory directly.
template <bool TRANS, typename T>
__device__ __forceinline__ T op_at(const T* __restrict__ x, int64_t ld, int64_t r, int64_t c) {
  return TRANS ? x[c * ld + r] : x[r * ld + c];
}

// The BM x BN tile of C this block computes. The grid is 1-D (no 65535 limit on either dim).
// GROUP = 1: tiles along n first, so consecutive blocks share their rows of A. GROUP > 1: down
// GROUP tile rows first, then the next column, so that the blocks resident at once read a few
// rows of A and a few columns of B (both stay in L2).
template <int BM, int BN, int GROUP = 1>
__device__ __forceinline__ void block_tile(int64_t tiles_m, int64_t tiles_n, int64_t* row0, int64_t* col0) {
  const int64_t t = blockIdx.x;
  if (GROUP == 1) {
    *row0 = t / tiles_n * BM;
    *col0 = t % tiles_n * BN;
    return;
  }
  const int64_t per_group = GROUP * tiles_n, first = t / per_group * GROUP, in_group = t % per_group;
  const int64_t rows = tiles_m - first < GROUP ? tiles_m - first : GROUP;
  *row0 = (first + in_group % rows) * BM;
  *col0 = in_group / rows * BN;
}

// A thread's share of an operand's BK x BX tiles, one tile per slice of k. Both operands are seen
// in (kk, x) coordinates, kk along the GEMM's k and x along m (A) or n (B): element (kk, x) is
// op(A)(x, kk) or op(B)(kk, x). In memory a tile runs along x when X_CONTIG (A transposed, B as
// stored) and along kk otherwise (A as stored, B transposed). Threads take V consecutive elements
// along that dimension, consecutive threads the next V, so a warp's loads coalesce whatever the
// transposition; the block covers the tile in kPasses passes of THREADS vectors, each pass
// kLines lines further across. Past the matrix's edge a vector reads as zeros: a tail of k adds
// nothing, a tail of m or n computes outputs that are never stored. V > 1 needs the vector route
// (vector_route): a vector then lies wholly inside or wholly outside the matrix. Element (kk, x)
// goes to s[kk * SK + x * SX] in shared memory: each rung lays the tile out as it reads it fastest.
template <typename T, int BK, int BX, int THREADS, int V, bool X_CONTIG, int SK, int SX>
class TileLoader {
 public:
  static constexpr int kRun = (X_CONTIG ? BX : BK) / V;   // vectors across a line of the tile
  static constexpr int kLines = THREADS / kRun;           // lines one pass covers
  static constexpr int kPasses = BK * BX / V / THREADS;
  static_assert((X_CONTIG ? BX : BK) % V == 0 && THREADS % kRun == 0 && (BK * BX / V) % THREADS == 0,
                "the block's vectors tile the tile exactly");

  // base: the operand (row-major, leading dimension ld); this block's tiles start at x = x0.
  __device__ TileLoader(const T* base, int64_t ld, int64_t x0, int64_t x_end, int tid)
      : ld_(ld), kk_(X_CONTIG ? tid / kRun : tid % kRun * V), x_(X_CONTIG ? tid % kRun * V : tid / kRun) {
    p_ = base + (X_CONTIG ? kk_ * ld + x0 + x_ : (x0 + x_) * ld + kk_);
    x_left_ = clamp(x_end - x0 - x_, BX);
  }

  // Calls copy(dst, src, in) for each of the thread's vectors of the tile at k0: src its first
  // element in global memory, dst = s + kk * SK + x * SX, in = whether it lies inside the matrix
  // (else it must read as zeros).
  template <typename Copy>
  __device__ __forceinline__ void for_each(int64_t k0, int64_t k_end, T* s, Copy copy) const {
    const T* src = p_ + (X_CONTIG ? k0 * ld_ : k0);
    const int k_left = clamp(k_end - k0 - kk_, BK);
#pragma unroll
    for (int i = 0; i < kPasses; ++i) copy(dst(s, i), src + i * kLines * ld_, inside(i, k_left));
  }

  // A thread's vectors of one tile, held in registers between fetch and put: a rung that
  // double-buffers fetches tile t + 1 from global memory before it multiplies tile t, and puts it
  // into shared memory after, so the loads' latency hides behind the arithmetic.
  struct Staged {
    WbVec<T, V> v[kPasses];
  };

  // The tile at k0 from global memory into registers (zeros past the matrix's edges).
  __device__ __forceinline__ void fetch(int64_t k0, int64_t k_end, Staged& r) const {
    const T* src = p_ + (X_CONTIG ? k0 * ld_ : k0);
    const int k_left = clamp(k_end - k0 - kk_, BK);
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (inside(i, k_left)) {
        r.v[i] = wb_load<T, V>(src + i * kLines * ld_);
      } else {
#pragma unroll
        for (int t = 0; t < V; ++t) r.v[i].v[t] = T{};
      }
    }
  }

  // Fetched registers into the shared tile s. Where the destination is contiguous along the
  // vector too, its V elements go as one store.
  __device__ __forceinline__ void put(const Staged& r, T* s) const {
    constexpr int kStep = X_CONTIG ? SX : SK;  // shared-memory stride between a vector's elements
    static_assert(V == 1 || kStep != 1 || (X_CONTIG ? SK : SX) % V == 0, "aligned vector stores");
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if constexpr (kStep == 1) {
        wb_store<T, V>(dst(s, i), r.v[i]);
      } else {
#pragma unroll
        for (int t = 0; t < V; ++t) dst(s, i)[t * kStep] = r.v[i].v[t];
      }
    }
  }

  // The tile at k0 into s, through registers.
  __device__ __forceinline__ void load(int64_t k0, int64_t k_end, T* s) const {
    Staged r;
    fetch(k0, k_end, r);
    put(r, s);
  }

 private:
  // Pass i's vector: where it goes in the shared tile s, and whether it lies inside the matrix
  // (k_left: elements of k left from the thread's first line, clamped to BK).
  __device__ __forceinline__ T* dst(T* s, int i) const {
    const int across = i * kLines;  // lines past the thread's first vector
    return s + (X_CONTIG ? (kk_ + across) * SK + x_ * SX : kk_ * SK + (x_ + across) * SX);
  }
  __device__ __forceinline__ bool inside(int i, int k_left) const {
    const int across = i * kLines;
    return X_CONTIG ? x_left_ > 0 && k_left > across : k_left > 0 && x_left_ > across;
  }
  // How much of a length-`limit` line is left, in [0, limit]: fits an int, whatever the matrix.
  __device__ static int clamp(int64_t left, int limit) {
    return static_cast<int>(left < 0 ? 0 : left > limit ? limit : left);
  }
  const T* p_;   // the thread's first vector of the tile at k0 = 0
  int64_t ld_;
  int kk_, x_;   // its place in the tile
  int x_left_;   // elements of the matrix left along x from it (clamped to BX)
};

// Stores N consecutive results of C's row `row` from column `col` (those inside C), converted to
// T: V at a time (the vector route makes n and col multiples of V), else one by one.
template <int N, int V, typename T, typename A>
__device__ __forceinline__ void store_run(const Gemm<T>& g, int64_t row, int64_t col, const A* vals) {
  if (row >= g.m) return;
  T* out = g.c + row * g.n + col;
#pragma unroll
  for (int j = 0; j < N; j += V) {
    if (col + j >= g.n) break;
    WbVec<T, V> v;
#pragma unroll
    for (int t = 0; t < V; ++t) v.v[t] = wb_from_acc<T>(vals[j + t]);
    wb_store<T, V>(out + j, v);
  }
}

// Whether V-element vectors can carry every access of g: each operand's rows (along its
// contiguous dimension) and C's are whole vectors, 16-byte aligned. Otherwise a rung takes its
// V = 1 route (the same kernel, one element per access).
template <int V, bool TA, bool TB, typename T>
inline bool vector_route(const Gemm<T>& g) {
  const unsigned bytes = sizeof(T) * V;
  return g.lda % V == 0 && (TA ? g.m : g.k) % V == 0 && wb_aligned(g.a, bytes) && g.ldb % V == 0 &&
         (TB ? g.k : g.n) % V == 0 && wb_aligned(g.b, bytes) && g.n % V == 0 && wb_aligned(g.c, bytes);
}

inline int64_t tiles(int64_t extent, int tile) { return wb_ceil_div(extent, tile); }

// Launches `kernel` over a 1-D grid of `blocks` blocks (one per output tile).
template <typename... Params, typename... Args>
int launch(void (*kernel)(Params...), int64_t blocks, dim3 threads, cudaStream_t stream, Args... args) {
  if (blocks < 1 || blocks > 0x7fffffff) return WB_ERR_ARGUMENT;
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(args...);
  return wb_launch_status();
}

// launch, for KERNEL with `smem_bytes` of dynamic shared memory: beyond 48 KiB a kernel must opt
// in, once per kernel and device (a process may drive several GPUs).
template <auto KERNEL, typename... Args>
int launch_smem(int64_t blocks, dim3 threads, int smem_bytes, cudaStream_t stream, Args... args) {
  if (blocks < 1 || blocks > 0x7fffffff) return WB_ERR_ARGUMENT;
  if (smem_bytes > 48 * 1024) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    static std::atomic<uint64_t> opted{0};  // this KERNEL's: bit d, done on device d (past 63: every time)
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (e == cudaSuccess && (!bit || !(opted.load() & bit))) {
      e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
      if (e == cudaSuccess) opted.fetch_or(bit);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // returned here: not left behind for the next launch to report
      return static_cast<int>(e);
    }
  }
  KERNEL<<<static_cast<unsigned>(blocks), threads, smem_bytes, stream>>>(args...);
  return wb_launch_status();
}

// The launcher table of a rung: the forward is one GEMM, the backward two (matmul.h).
template <typename Rung>
struct Variant {
  static int forward(const WbMatmulForward* p, const WbLaunch* l) {
    if (p->m < 1 || p->k < 1 || p->n < 1) return WB_ERR_ARGUMENT;
    return wb_dispatch_dtype<Rung::kDtypes>(p->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Gemm<T> y{p->m, p->n, p->k, static_cast<const T*>(p->a), p->k, static_cast<const T*>(p->b), p->n,
                      static_cast<T*>(p->y)};
      return Rung::template gemm<T, false, false>(y, static_cast<cudaStream_t>(l->stream));
    });
  }
  static int backward(const WbMatmulBackward* p, const WbLaunch* l) {
    if (p->m < 1 || p->k < 1 || p->n < 1) return WB_ERR_ARGUMENT;
    return wb_dispatch_dtype<Rung::kDtypes>(p->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const auto stream = static_cast<cudaStream_t>(l->stream);
      const T *dy = static_cast<const T*>(p->dy), *a = static_cast<const T*>(p->a), *b = static_cast<const T*>(p->b);
      // da [m, k] = dy [m, n] @ b^T: N/T over an inner dimension n; b [k, n] read as op(B) [n, k]
      const Gemm<T> da{p->m, p->k, p->n, dy, p->n, b, p->n, static_cast<T*>(p->da)};
      // db [k, n] = a^T @ dy [m, n]: T/N over an inner dimension m; a [m, k] read as op(A) [k, m]
      const Gemm<T> db{p->k, p->n, p->m, a, p->k, dy, p->n, static_cast<T*>(p->db)};
      const int status = Rung::template gemm<T, false, true>(da, stream);
      return status != WB_OK ? status : Rung::template gemm<T, true, false>(db, stream);
    });
  }
  static constexpr WbMatmulLaunchers launchers = {forward, backward, nullptr};
};

}  // namespace matmul

// cpu: the C++ CPU implementation, on torch's thread pool (lent by the harness). The reference
// path on machines without a GPU and in CI: every dtype, 16-bit values converted to float exactly
// as PyTorch does, products summed in float (double for float64).
// A blocked GEMM, C = op(A) @ op(B) with the CUDA rungs' transpose flags (matmul.h), so the
// backward's da = dy @ b^T and db = a^T @ dy read dy, a and b in place. C is cut into tasks of up
// to 512 x 256 (fewer rows where that would leave the threads too few tasks). A task walks k in
// slices of 256: it packs op(B)'s slice once into panels of NR columns, then, for each 128-row
// block, op(A)'s slice into panels of MR rows (converting 16-bit values once, turning a transposed
// operand's strided reads into one pass, zero-padding the edges), and runs a micro-kernel per
// MR x NR tile: the tile's sums stay in vector registers through the slice, each step one broadcast
// of op(A) times NR values of op(B). The tile is written with the compiler's vectors (GCC/Clang
// vector extensions, no intrinsics) and sized per instruction set, picked once at run time: 8 x 32
// for AVX-512, 4 x 16 for AVX2 + FMA, 4 x 8 for SSE2 (float; half as many double columns). Each
// output is one running sum over k in k order, whatever the thread count: deterministic. The packed
// panels and sums live in per-thread buffers kept between calls: fresh pages would cost a small
// GEMM more than its arithmetic.
#include <algorithm>
#include <vector>

#include "matmul.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t MB = 128, NB = 256, KB = 256;  // a row block of A's panels, C's columns per task, a slice of k
constexpr int64_t kMaxRowBlocks = 4;             // per task: op(B)'s packed slice serves up to 4 row blocks

template <typename T>
struct Gemm {  // as in gemm.cuh: op(A)(i, p) = TA ? a[p * lda + i] : a[i * lda + p], op(B) alike
  int64_t m, n, k;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
};

// n values of A for this thread (each caller its own: the three buffers are carved from one).
template <typename A>
A* thread_buffer(size_t n) {
  thread_local std::vector<A> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// out[(t * kb + p) * R + r] = x(t * R + r, p) for r < R, p < kb, t < tiles, 0 past `rows`:
// x(i, p) = src[i * ld_i + p * ld_p] as A. The inner loop runs along whichever index is contiguous.
template <int R, typename T, typename A>
inline void pack_panels(const T* src, int64_t ld_i, int64_t ld_p, int64_t rows, int64_t kb, A* out) {
  for (int64_t t = 0; t * R < rows; ++t) {
    const int64_t live = std::min<int64_t>(R, rows - t * R);
    A* o = out + t * kb * R;
    const T* s = src + t * R * ld_i;
    if (live < R) std::fill(o, o + kb * R, A(0));  // the edge panel's missing rows
    if (ld_i == 1 && live == R) {                   // R contiguous values per p
      for (int64_t p = 0; p < kb; ++p)
        for (int r = 0; r < R; ++r) o[p * R + r] = wb_to_acc(s[p * ld_p + r]);
    } else {                                        // one row of x at a time
      for (int64_t r = 0; r < live; ++r)
        for (int64_t p = 0; p < kb; ++p) o[p * R + r] = wb_to_acc(s[r * ld_i + p * ld_p]);
    }
  }
}

// acc[i][j] += sum over p < kb of ap[p * MR + i] * bp[p * NR + j] for the MR x NR tile at acc
// (row stride NB), in p order. V holds NR / NV values of A.
template <int MR, int NV, typename V, typename A>
inline void micro_tile(const A* ap, const A* bp, A* acc, int64_t kb) {
  constexpr int W = sizeof(V) / sizeof(A), NR = NV * W;
  V c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) memcpy(&c[i][v], acc + i * NB + v * W, sizeof(V));
  for (int64_t p = 0; p < kb; ++p) {
    V b[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) memcpy(&b[v], bp + p * NR + v * W, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V a = ap[p * MR + i] - V{};  // a broadcast (x - 0 folds to x; x + 0 would be an add)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) c[i][v] += a * b[v];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) memcpy(acc + i * NB + v * W, &c[i][v], sizeof(V));
}

// Tasks [t0, t1) of C, each mg rows by NB columns, with MR x (NV vectors of VBYTES) tiles.
template <int MR, int NV, int VBYTES, bool TA, bool TB, typename T>
inline void gemm_blocks(const Gemm<T>& g, int64_t rows_per_task, int64_t t0, int64_t t1) {
  using A = wb_acc_t<T>;
  typedef A V __attribute__((vector_size(VBYTES)));
  constexpr int NR = NV * VBYTES / static_cast<int>(sizeof(A));
  static_assert(MB % MR == 0 && NB % NR == 0, "a block holds whole tiles");
  A* ap = thread_buffer<A>(MB * KB + KB * NB + kMaxRowBlocks * MB * NB);
  A *bp = ap + MB * KB, *acc = bp + KB * NB;
  // op(A)(i, p) = a[i * a_i + p * a_p], op(B)(p, j) = b[p * b_p + j * b_j]
  const int64_t a_i = TA ? 1 : g.lda, a_p = TA ? g.lda : 1, b_p = TB ? 1 : g.ldb, b_j = TB ? g.ldb : 1;
  const int64_t col_tasks = (g.n + NB - 1) / NB;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t r0 = t / col_tasks * rows_per_task, j0 = t % col_tasks * NB;
    const int64_t mg = std::min(rows_per_task, g.m - r0), nb = std::min(NB, g.n - j0), nt = (nb + NR - 1) / NR;
    std::fill(acc, acc + mg * NB, A(0));
    for (int64_t p0 = 0; p0 < g.k; p0 += KB) {
      const int64_t kb = std::min(KB, g.k - p0);
      pack_panels<NR>(g.b + p0 * b_p + j0 * b_j, b_j, b_p, nb, kb, bp);
      for (int64_t i0 = 0; i0 < mg; i0 += MB) {
        const int64_t mb = std::min(MB, mg - i0), mt = (mb + MR - 1) / MR;
        pack_panels<MR>(g.a + (r0 + i0) * a_i + p0 * a_p, a_i, a_p, mb, kb, ap);
        for (int64_t it = 0; it < mt; ++it)
          for (int64_t jt = 0; jt < nt; ++jt)
            micro_tile<MR, NV, V>(ap + it * kb * MR, bp + jt * kb * NR, acc + (i0 + it * MR) * NB + jt * NR, kb);
      }
    }
    for (int64_t i = 0; i < mg; ++i)
      for (int64_t j = 0; j < nb; ++j) g.c[(r0 + i) * g.n + j0 + j] = wb_from_acc<T>(acc[i * NB + j]);
  }
}

// The blocks' function for each instruction set, everything inlined into it (flatten).
template <bool TA, bool TB, typename T>
__attribute__((flatten)) void blocks_sse2(const Gemm<T>& g, int64_t rows_per_task, int64_t t0, int64_t t1) {
  gemm_blocks<4, 2, 16, TA, TB>(g, rows_per_task, t0, t1);
}
#if WB_CPU_CLONES
template <bool TA, bool TB, typename T>
__attribute__((target("arch=x86-64-v3"), flatten))
void blocks_avx2(const Gemm<T>& g, int64_t rows_per_task, int64_t t0, int64_t t1) {
  gemm_blocks<4, 2, 32, TA, TB>(g, rows_per_task, t0, t1);
}
template <bool TA, bool TB, typename T>
__attribute__((target("arch=x86-64-v4"), flatten))
void blocks_avx512(const Gemm<T>& g, int64_t rows_per_task, int64_t t0, int64_t t1) {
  gemm_blocks<8, 2, 64, TA, TB>(g, rows_per_task, t0, t1);
}
#endif

template <bool TA, bool TB, typename T>
void gemm(const Gemm<T>& g, const WbLaunch* l) {
  auto blocks = blocks_sse2<TA, TB, T>;
#if WB_CPU_CLONES
  if (__builtin_cpu_supports("x86-64-v4")) blocks = blocks_avx512<TA, TB, T>;
  else if (__builtin_cpu_supports("x86-64-v3")) blocks = blocks_avx2<TA, TB, T>;
#endif
  // Up to kMaxRowBlocks row blocks per task; half as many rows (down to 8, a multiple of every MR)
  // while that leaves fewer than 4 tasks and keeps each at 2^19 multiply-adds or more, about what
  // waking a thread costs. The split changes no sum.
  const int64_t col_tasks = (g.n + NB - 1) / NB, task_cols = std::min(g.n, NB);
  int64_t rows_per_task = kMaxRowBlocks * MB;
  while (rows_per_task > 8 && (g.m + rows_per_task - 1) / rows_per_task * col_tasks < 4 &&
         rows_per_task / 2 * task_cols * g.k >= (int64_t{1} << 19))
    rows_per_task /= 2;
  const int64_t tasks = (g.m + rows_per_task - 1) / rows_per_task * col_tasks;
  wb_parallel_for(l, 0, tasks, 1, [&](int64_t t0, int64_t t1) { blocks(g, rows_per_task, t0, t1); });
}

int forward(const WbMatmulForward* p, const WbLaunch* l) {
  if (p->m < 1 || p->k < 1 || p->n < 1) return WB_ERR_ARGUMENT;
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm<false, false>(Gemm<T>{p->m, p->n, p->k, static_cast<const T*>(p->a), p->k, static_cast<const T*>(p->b), p->n,
                               static_cast<T*>(p->y)}, l);
    return WB_OK;
  });
}

int backward(const WbMatmulBackward* p, const WbLaunch* l) {
  if (p->m < 1 || p->k < 1 || p->n < 1) return WB_ERR_ARGUMENT;
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *dy = static_cast<const T*>(p->dy), *a = static_cast<const T*>(p->a), *b = static_cast<const T*>(p->b);
    gemm<false, true>(Gemm<T>{p->m, p->k, p->n, dy, p->n, b, p->n, static_cast<T*>(p->da)}, l);  // dy @ b^T
    gemm<true, false>(Gemm<T>{p->k, p->n, p->m, a, p->k, dy, p->n, static_cast<T*>(p->db)}, l);  // a^T @ dy
    return WB_OK;
  });
}

const WbMatmulLaunchers launchers = {forward, backward, nullptr};

}  // namespace

WB_EXPORT_VARIANT(matmul, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on torch's CPU thread pool: 512 x 256 tasks of C, k in slices of 256, packed panels, a "
                  "register-tiled vector micro-kernel per instruction set (AVX-512/AVX2/SSE2 picked at run time); "
                  "any size and alignment",
                  launchers, wb_cpu_status_string)

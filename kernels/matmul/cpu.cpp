// cpu: the C++ CPU implementation, on torch's thread pool (lent by the harness). The reference
// path on machines without a GPU and in CI: every dtype, 16-bit values converted to float exactly
// as PyTorch does, products summed in float (double for float64).
// A blocked GEMM, C = op(A) @ op(B) with the CUDA rungs' transpose flags (matmul.h), so the
// backward's da = dy @ b^T and db = a^T @ dy read dy, a and b in place. C is cut into 128 x 256
// blocks, one task each; a task walks k in slices of 256, packing op(A)'s slice into panels of MR
// rows and op(B)'s into panels of NR columns (converting 16-bit values once, turning a transposed
// operand's strided reads into one pass, zero-padding the edges), then runs a micro-kernel per
// MR x NR tile of the block: the tile's sums stay in vector registers through the slice, each step
// one broadcast of op(A) times NR values of op(B). The tile is written with vectors of the compiler
// (GCC/Clang vector extensions, no intrinsics) and sized per instruction set, picked once at run
// time: 8 x 32 for AVX-512, 4 x 16 for AVX2 + FMA, 4 x 8 for SSE2 (float; half as many double
// columns). Each output is one running sum over k in k order, whatever the thread count:
// deterministic.
#include <algorithm>
#include <vector>

#include "matmul.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t MB = 128, NB = 256, KB = 256;  // block of C, slice of k (MB: a multiple of every MR)

template <typename T>
struct Gemm {  // as in gemm.cuh: op(A)(i, p) = TA ? a[p * lda + i] : a[i * lda + p], op(B) alike
  int64_t m, n, k;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
};

// One block of C, as a task: its MB x NB accumulators and the packed panels of the slice.
template <typename A>
struct Scratch {
  std::vector<A> ap = std::vector<A>(MB * KB), bp = std::vector<A>(KB * NB), acc = std::vector<A>(MB * NB);
};

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

// Blocks [t0, t1) of C with MR x (NV vectors of VBYTES) tiles.
template <int MR, int NV, int VBYTES, bool TA, bool TB, typename T>
inline void gemm_blocks(const Gemm<T>& g, int64_t t0, int64_t t1) {
  using A = wb_acc_t<T>;
  typedef A V __attribute__((vector_size(VBYTES)));
  constexpr int NR = NV * VBYTES / static_cast<int>(sizeof(A));
  static_assert(MB % MR == 0 && NB % NR == 0, "a block holds whole tiles");
  Scratch<A> s;
  A *ap = s.ap.data(), *bp = s.bp.data(), *acc = s.acc.data();
  const int64_t col_blocks = (g.n + NB - 1) / NB;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t i0 = t / col_blocks * MB, j0 = t % col_blocks * NB;
    const int64_t mb = std::min(MB, g.m - i0), nb = std::min(NB, g.n - j0);
    const int64_t mt = (mb + MR - 1) / MR, nt = (nb + NR - 1) / NR;  // tiles, the last ones zero-padded
    std::fill(acc, acc + MB * NB, A(0));
    for (int64_t p0 = 0; p0 < g.k; p0 += KB) {
      const int64_t kb = std::min(KB, g.k - p0);
      // ap[(it * kb + p) * MR + i] = op(A)(i0 + it * MR + i, p0 + p); bp[(jt * kb + p) * NR + j] likewise.
      for (int64_t i = 0; i < mt * MR; ++i)
        for (int64_t p = 0; p < kb; ++p)
          ap[(i / MR * kb + p) * MR + i % MR] =
              i < mb ? wb_to_acc(TA ? g.a[(p0 + p) * g.lda + i0 + i] : g.a[(i0 + i) * g.lda + p0 + p]) : A(0);
      for (int64_t p = 0; p < kb; ++p)
        for (int64_t j = 0; j < nt * NR; ++j)
          bp[(j / NR * kb + p) * NR + j % NR] =
              j < nb ? wb_to_acc(TB ? g.b[(j0 + j) * g.ldb + p0 + p] : g.b[(p0 + p) * g.ldb + j0 + j]) : A(0);
      for (int64_t it = 0; it < mt; ++it)
        for (int64_t jt = 0; jt < nt; ++jt)
          micro_tile<MR, NV, V>(ap + it * kb * MR, bp + jt * kb * NR, acc + it * MR * NB + jt * NR, kb);
    }
    for (int64_t i = 0; i < mb; ++i)
      for (int64_t j = 0; j < nb; ++j) g.c[(i0 + i) * g.n + j0 + j] = wb_from_acc<T>(acc[i * NB + j]);
  }
}

// The blocks' function for each instruction set, everything inlined into it (flatten).
template <bool TA, bool TB, typename T>
__attribute__((flatten)) void blocks_sse2(const Gemm<T>& g, int64_t t0, int64_t t1) {
  gemm_blocks<4, 2, 16, TA, TB>(g, t0, t1);
}
#if WB_CPU_CLONES
template <bool TA, bool TB, typename T>
__attribute__((target("arch=x86-64-v3"), flatten)) void blocks_avx2(const Gemm<T>& g, int64_t t0, int64_t t1) {
  gemm_blocks<4, 2, 32, TA, TB>(g, t0, t1);
}
template <bool TA, bool TB, typename T>
__attribute__((target("arch=x86-64-v4"), flatten)) void blocks_avx512(const Gemm<T>& g, int64_t t0, int64_t t1) {
  gemm_blocks<8, 2, 64, TA, TB>(g, t0, t1);
}
#endif

template <bool TA, bool TB, typename T>
void gemm(const Gemm<T>& g, const WbLaunch* l) {
  auto blocks = blocks_sse2<TA, TB, T>;
#if WB_CPU_CLONES
  if (__builtin_cpu_supports("x86-64-v4")) blocks = blocks_avx512<TA, TB, T>;
  else if (__builtin_cpu_supports("x86-64-v3")) blocks = blocks_avx2<TA, TB, T>;
#endif
  const int64_t n_blocks = (g.m + MB - 1) / MB * ((g.n + NB - 1) / NB);
  // a task of at least ~2^21 multiply-adds: below that, threading costs more than it saves
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 21) / (MB * NB * std::max<int64_t>(g.k, 1)));
  wb_parallel_for(l, 0, n_blocks, grain, [&](int64_t t0, int64_t t1) { blocks(g, t0, t1); });
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
                  "C++ on torch's CPU thread pool: 128 x 256 blocks of C, k in slices of 256, packed panels, a "
                  "register-tiled vector micro-kernel per instruction set (AVX-512/AVX2/SSE2 picked at run time); "
                  "any size and alignment",
                  launchers, wb_cpu_status_string)

// cpu: the C++ CPU implementation, on torch's thread pool (lent by the harness). The reference
// path on machines without a GPU and in CI: every dtype, 16-bit values converted to float exactly
// as PyTorch does, products summed in float (double for float64).
// A cache-blocked GEMM, C = op(A) @ op(B) with the CUDA rungs' transpose flags (matmul.h), so the
// backward's da = dy @ b^T and db = a^T @ dy read dy, a and b in place. C is cut into 64 x 256
// blocks, one task each; a task walks k in slices of 256, packing op(A)'s 64 x 256 and op(B)'s
// 256 x 256 panel into contiguous accumulator-type buffers (converting 16-bit values once, and
// turning a transposed operand's strided reads into one pass), then adds each row of the block
// four rows at a time with a unit-stride inner loop the compiler vectorizes; the block stays in L1/L2.
// Each output is one sum over k in k order, whatever the thread count: deterministic.
#include <algorithm>
#include <vector>

#include "matmul.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t MB = 64, NB = 256, KB = 256;  // block of C, slice of k
constexpr int64_t kRows = 4;                    // rows of C updated together: each row of B loaded once per 4

template <typename T>
struct Gemm {  // as in gemm.cuh: op(A)(i, p) = TA ? a[p * lda + i] : a[i * lda + p], op(B) alike
  int64_t m, n, k;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
};

// out[r * cols + c] = op(X)(r0 + r, c0 + c) as A, for r < rows, c < cols.
template <bool TRANS, typename T, typename A>
void pack(const T* x, int64_t ld, int64_t r0, int64_t c0, int64_t rows, int64_t cols, A* out) {
  if (TRANS) {  // op(X) rows are X's columns: walk X's rows (contiguous) and scatter
    for (int64_t c = 0; c < cols; ++c) {
      const T* src = x + (c0 + c) * ld + r0;
      for (int64_t r = 0; r < rows; ++r) out[r * cols + c] = wb_to_acc(src[r]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const T* src = x + (r0 + r) * ld + c0;
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = wb_to_acc(src[c]);
    }
  }
}

// acc[i * nb + j] += sum over p < kb of ap[i * kb + p] * bp[p * nb + j], for i < mb, in p order.
template <typename A>
void block_update(const A* ap, const A* bp, A* acc, int64_t mb, int64_t nb, int64_t kb) {
  int64_t i = 0;
  for (; i + kRows <= mb; i += kRows) {
    A *c0 = acc + i * nb, *c1 = c0 + nb, *c2 = c1 + nb, *c3 = c2 + nb;
    for (int64_t p = 0; p < kb; ++p) {
      const A a0 = ap[i * kb + p], a1 = ap[(i + 1) * kb + p], a2 = ap[(i + 2) * kb + p], a3 = ap[(i + 3) * kb + p];
      const A* b = bp + p * nb;
      for (int64_t j = 0; j < nb; ++j) {
        const A bj = b[j];
        c0[j] += a0 * bj;
        c1[j] += a1 * bj;
        c2[j] += a2 * bj;
        c3[j] += a3 * bj;
      }
    }
  }
  for (; i < mb; ++i) {
    A* c = acc + i * nb;
    for (int64_t p = 0; p < kb; ++p) {
      const A a = ap[i * kb + p];
      const A* b = bp + p * nb;
      for (int64_t j = 0; j < nb; ++j) c[j] += a * b[j];
    }
  }
}

template <bool TA, bool TB, typename T>
void gemm(const Gemm<T>& g, const WbLaunch* l) {
  using A = wb_acc_t<T>;
  const int64_t col_blocks = (g.n + NB - 1) / NB, blocks = (g.m + MB - 1) / MB * col_blocks;
  // a task of at least ~2^21 multiply-adds: below that, threading costs more than it saves
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 21) / (MB * NB * std::max<int64_t>(g.k, 1)));
  wb_parallel_for(l, 0, blocks, grain, [&](int64_t t0, int64_t t1) {
    std::vector<A> ap(MB * KB), bp(KB * NB), acc(MB * NB);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t / col_blocks * MB, j0 = t % col_blocks * NB;
      const int64_t mb = std::min(MB, g.m - i0), nb = std::min(NB, g.n - j0);
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t p0 = 0; p0 < g.k; p0 += KB) {
        const int64_t kb = std::min(KB, g.k - p0);
        pack<TA>(g.a, g.lda, i0, p0, mb, kb, ap.data());
        pack<TB>(g.b, g.ldb, p0, j0, kb, nb, bp.data());
        block_update(ap.data(), bp.data(), acc.data(), mb, nb, kb);
      }
      for (int64_t i = 0; i < mb; ++i)
        for (int64_t j = 0; j < nb; ++j) g.c[(i0 + i) * g.n + j0 + j] = wb_from_acc<T>(acc[i * nb + j]);
    }
  });
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
                  "C++ on torch's CPU thread pool: 64 x 256 blocks of C, k in slices of 256, operands packed "
                  "(transposes read in place); any size and alignment",
                  launchers, wb_cpu_status_string)

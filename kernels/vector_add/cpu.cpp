// cpu: the C++ CPU implementation, the reference path without a GPU (CI, the NumPy front end's
// host path). It adds over chunks of elements on the thread pool its front end lends (torch's, or
// the NumPy module's std::threads), every dtype the CUDA variants take, 16-bit values summed in
// float and rounded once, as PyTorch does. Predicted: memory-bound like the GPU variants, at the
// host's copy bandwidth for three arrays once n is past the threading grain.
#include "vector_add.h"
#include "wb_elementwise_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kCopyBlock = 4096;  // elements per copy: dc's block is read again from L1 for db

// The forward is the family's (wb_elementwise_cpu.h), a vectorized loop; the backward is written
// here by hand: da = db = dc, the same bits copied into both (no rounding: the values are already
// T) with memcpy, which the C library vectorizes for the CPU it runs on.
int backward(const WbVectorAddBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dc = static_cast<const T*>(p->in[0]);
    T* da = static_cast<T*>(p->out[0]);
    T* db = static_cast<T*>(p->out[1]);
    wb_parallel_for(l, 0, p->n, kWbCpuGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t b = i0; b < i1; b += kCopyBlock) {
        const size_t bytes = static_cast<size_t>(i1 - b < kCopyBlock ? i1 - b : kCopyBlock) * sizeof(T);
        memcpy(da + b, dc + b, bytes);
        memcpy(db + b, dc + b, bytes);
      }
    });
    return WB_OK;
  });
}

const WbElementwiseLaunchers launchers = {wb_elementwise::cpu_step<kDtypes, WbVectorAddForwardStep>, backward};

}  // namespace

WB_EXPORT_VARIANT(vector_add, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on the front end's CPU thread pool, parallel over chunks of elements, vectorized "
                  "(AVX-512/AVX2/SSE2 picked at load); any alignment and size",
                  launchers, wb_cpu_status_string)

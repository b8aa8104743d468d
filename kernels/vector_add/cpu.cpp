// cpu: the C++ CPU implementation, the reference path without a GPU (CI, the NumPy front end's
// host path). It adds over chunks of elements on the thread pool its front end lends (torch's, or
// the NumPy module's std::threads), every dtype the CUDA variants take, 16-bit values summed in
// float and rounded once, as PyTorch does. Predicted: memory-bound like the GPU variants, at the
// host's copy bandwidth for three arrays once n is past the threading grain.
#include "vector_add.h"
#include "wb_cpu.h"

namespace {

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;
constexpr int64_t kGrain = 1 << 15;  // below this many elements a thread costs more than it saves

int forward(const WbVectorAddForward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(p->a);
    const T* b = static_cast<const T*>(p->b);
    T* c = static_cast<T*>(p->c);
    wb_parallel_for(l, 0, p->n, kGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) c[i] = wb_from_acc<T>(wb_to_acc(a[i]) + wb_to_acc(b[i]));
    });
    return WB_OK;
  });
}

// da = db = dc: a copy of the same bits into both (no rounding: the values are already T).
int backward(const WbVectorAddBackward* p, const WbLaunch* l) {
  return wb_dispatch_dtype<kDtypes>(p->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dc = static_cast<const T*>(p->dc);
    T* da = static_cast<T*>(p->da);
    T* db = static_cast<T*>(p->db);
    wb_parallel_for(l, 0, p->n, kGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) da[i] = db[i] = dc[i];
    });
    return WB_OK;
  });
}

const WbVectorAddLaunchers launchers = {forward, backward};

}  // namespace

WB_EXPORT_VARIANT(vector_add, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "C++ on the front end's CPU thread pool, parallel over chunks of elements; any alignment and size",
                  launchers, wb_cpu_status_string)

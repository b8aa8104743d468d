// vec4: what it adds over scalar: each thread moves 16 bytes per access (a float4's worth of a,
// of b and of c: WbVec<float, 4>, LDG.E.128 / STG.E.128), so a warp issues 4x fewer memory
// instructions for the same bytes, and the grid is flat and one-shot (one vector per thread, a
// block per 1024 floats, no loop): many short blocks keep every SM's loads in flight, which is what
// streaming at the copy rate takes. float32 only.
// Route: the last n % 4 elements go through the same kernel with V = 1 (one float per thread); a
// pointer that is not 16-byte aligned (a view with an offset, a NumPy slice) sends the whole call there.
// Backward: dc read once per vector, written to da and db in the same pass.
// Predicted: at the copy bandwidth for three arrays (12 bytes per element: a and b read, c
// written; elementwise_mul's vec4, the same stream, ran at 102% on the H100), a few % over scalar.
// Measured (results/gpu/1e52cd0, H100, float32): 2^26 0.259 ms, 103% of the copy bandwidth, 1.10x
// scalar, 1.01x eager; Nsight Compute (profile_vector_add.log): DRAM 91% of peak against scalar's 83%,
// a quarter of the load requests. Through the NumPy front end: 101% (results/gpu/36f9438/ndarray).
#include "vector_add.h"
#include "wb_vec.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWidth = 4;  // floats per 16-byte access (a float4's bytes, WbVec<float, 4>)

// c = a + b over nvec vectors of V floats: V = 4 is the 16-byte path, V = 1 the scalar route.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int64_t nvec) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= nvec) return;
  const WbVec<T, V> x = wb_load<T, V>(a + i * V), y = wb_load<T, V>(b + i * V);
  WbVec<T, V> sum;
#pragma unroll
  for (int j = 0; j < V; ++j) sum.v[j] = x.v[j] + y.v[j];
  wb_store<T, V>(c + i * V, sum);
}

// da = db = dc over nvec vectors: one load, two stores.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ dc, T* __restrict__ da, T* __restrict__ db, int64_t nvec) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= nvec) return;
  const WbVec<T, V> g = wb_load<T, V>(dc + i * V);
  wb_store<T, V>(da + i * V, g);
  wb_store<T, V>(db + i * V, g);
}

unsigned blocks(int64_t count) { return static_cast<unsigned>(wb_ceil_div(count, kThreads)); }

// The vector part where every pointer is 16-byte aligned (else none), then the rest one by one.
template <typename Kernel1, typename KernelV>
int split_launch(const void* const* ptrs, int count, int64_t n, KernelV vec, Kernel1 one) {
  bool aligned = true;
  for (int k = 0; k < count; ++k) aligned = aligned && wb_aligned(ptrs[k], sizeof(float) * kWidth);
  const int64_t nvec = aligned ? n / kWidth : 0;
  if (nvec) vec(nvec);
  if (n > nvec * kWidth) one(nvec * kWidth, n - nvec * kWidth);
  return wb_launch_status();
}

int forward(const WbVectorAddForward* p, const WbLaunch* l) {
  if (p->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const float* a = static_cast<const float*>(p->a);
  const float* b = static_cast<const float*>(p->b);
  float* c = static_cast<float*>(p->c);
  const void* ptrs[] = {a, b, c};
  return split_launch(
      ptrs, 3, p->n,
      [&](int64_t nvec) { forward_kernel<float, kWidth><<<blocks(nvec), kThreads, 0, stream>>>(a, b, c, nvec); },
      [&](int64_t at, int64_t rest) {
        forward_kernel<float, 1><<<blocks(rest), kThreads, 0, stream>>>(a + at, b + at, c + at, rest);
      });
}

int backward(const WbVectorAddBackward* p, const WbLaunch* l) {
  if (p->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  const auto stream = static_cast<cudaStream_t>(l->stream);
  const float* dc = static_cast<const float*>(p->dc);
  float* da = static_cast<float*>(p->da);
  float* db = static_cast<float*>(p->db);
  const void* ptrs[] = {dc, da, db};
  return split_launch(
      ptrs, 3, p->n,
      [&](int64_t nvec) { backward_kernel<float, kWidth><<<blocks(nvec), kThreads, 0, stream>>>(dc, da, db, nvec); },
      [&](int64_t at, int64_t rest) {
        backward_kernel<float, 1><<<blocks(rest), kThreads, 0, stream>>>(dc + at, da + at, db + at, rest);
      });
}

const WbVectorAddLaunchers launchers = {forward, backward};

}  // namespace

WB_EXPORT_VARIANT(vector_add, WB_DEVICE_CUDA, WB_F32,
                  "float4 (16-byte) loads and stores, flat one-shot grid; "
                  "n % 4 tail or a pointer not 16-byte aligned -> one element per thread",
                  launchers, wb_cuda_status_string)

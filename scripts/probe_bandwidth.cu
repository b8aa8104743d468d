// Which memory access pattern reaches the copy bandwidth for the workbench's memory-bound ops?
// A standalone probe (nvcc -O3 -arch=sm_90 -I kernels/common -I kernels/scale_bias_relu), run by
// `STEPS=probe bash scripts/gpu_run.sh`: each configuration of the same math on the same 1 GiB
// float tensors, median of 15 timed runs (CUDA events), against a device-to-device copy measured
// the same way. Its output is the evidence for the choices in kernels/common/wb_elementwise.cuh
// and kernels/common/wb_row_tiles.cuh (results/gpu/<commit>/probe.log).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "relu.h"
#include "wb_row_tiles.cuh"

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t err_ = (x);                                                             \
    if (err_ != cudaSuccess) {                                                          \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

enum Load { kPlain, kStream, kNc };

template <Load L>
__device__ __forceinline__ float4 load4(const float4* p) {
  if constexpr (L == kStream) return __ldcs(p);
  if constexpr (L == kNc) return __ldg(p);
  return *p;
}

__device__ __forceinline__ float4 mul4(float4 a, float4 b) { return {a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w}; }

// One-shot grid: a block owns TPB * U float4s, thread t takes t, t + TPB, ...
template <int TPB, int U, Load L>
__global__ void __launch_bounds__(TPB) mul_oneshot(const float4* a, const float4* b, float4* y, int64_t n4) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * TPB * U + threadIdx.x;
  float4 va[U], vb[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) {
      va[u] = load4<L>(a + base + u * TPB);
      vb[u] = load4<L>(b + base + u * TPB);
    }
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) y[base + u * TPB] = mul4(va[u], vb[u]);
}

// The one-shot kernel with 32-bit index arithmetic (Triton's choice below 2^31 elements).
template <int TPB, int U>
__global__ void __launch_bounds__(TPB) mul_oneshot32(const float4* a, const float4* b, float4* y, int n4) {
  const int base = blockIdx.x * TPB * U + threadIdx.x;
  float4 va[U], vb[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) {
      va[u] = a[base + u * TPB];
      vb[u] = b[base + u * TPB];
    }
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) y[base + u * TPB] = mul4(va[u], vb[u]);
}

// Grid-stride: a fixed grid of blocks, each thread U float4s per step.
template <int TPB, int U, Load L>
__global__ void __launch_bounds__(TPB) mul_stride(const float4* a, const float4* b, float4* y, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * TPB * U;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * TPB * U + threadIdx.x; base < n4; base += stride) {
    float4 va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * TPB < n4) {
        va[u] = load4<L>(a + base + u * TPB);
        vb[u] = load4<L>(b + base + u * TPB);
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * TPB < n4) y[base + u * TPB] = mul4(va[u], vb[u]);
  }
}

// Backward of the product: da = g * b, db = g * a (3 streams in, 2 out).
template <int TPB, int U, Load L>
__global__ void __launch_bounds__(TPB) mulgrad_oneshot(const float4* g, const float4* a, const float4* b, float4* da,
                                                       float4* db, int64_t n4) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * TPB * U + threadIdx.x;
  float4 vg[U], va[U], vb[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) {
      vg[u] = load4<L>(g + base + u * TPB);
      va[u] = load4<L>(a + base + u * TPB);
      vb[u] = load4<L>(b + base + u * TPB);
    }
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) {
      da[base + u * TPB] = mul4(vg[u], vb[u]);
      db[base + u * TPB] = mul4(vg[u], va[u]);
    }
}

__global__ void mulgrad_scalar(const float* g, const float* a, const float* b, float* da, float* db, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    da[i] = g[i] * b[i];
    db[i] = g[i] * a[i];
  }
}

__global__ void mul_scalar(const float* a, const float* b, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] * b[i];
}

// relu(x * s + bias[col]) over a flat grid: the bias found by a modulo per float4 (cols % 4 == 0).
template <int TPB, int U, Load L>
__global__ void __launch_bounds__(TPB) sbr_flat(const float4* x, const float* bias, float4* y, int64_t n4,
                                                int64_t cols4, float s) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * TPB * U + threadIdx.x;
  float4 vx[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * TPB < n4) vx[u] = load4<L>(x + base + u * TPB);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * TPB;
    if (i < n4) {
      const float4 b = reinterpret_cast<const float4*>(bias)[i % cols4];
      const WbScaleBiasRelu<float> f{s};
      y[i] = {f.forward(vx[u].x, b.x), f.forward(vx[u].y, b.y), f.forward(vx[u].z, b.z), f.forward(vx[u].w, b.w)};
    }
  }
}

float median_ms(const std::function<void()>& fn, int reps = 15) {
  cudaEvent_t s, e;
  CHECK(cudaEventCreate(&s));
  CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(s));
    fn();
    CHECK(cudaEventRecord(e));
    CHECK(cudaEventSynchronize(e));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, s, e));
    t.push_back(ms);
  }
  CHECK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  const int64_t n = int64_t(1) << 28, n4 = n / 4, rows = 16384, cols = 16384;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<float*> buf(5);
  for (auto& p : buf) {
    CHECK(cudaMalloc(&p, n * sizeof(float)));
    CHECK(cudaMemset(p, 0x3f, n * sizeof(float)));  // 0.75-ish everywhere: no zeros, no denormals
  }
  float* bias;
  CHECK(cudaMalloc(&bias, cols * sizeof(float)));
  CHECK(cudaMemset(bias, 0x3e, cols * sizeof(float)));
  const double bytes1 = double(n) * sizeof(float);
  const float copy = median_ms([&] { CHECK(cudaMemcpyAsync(buf[1], buf[0], n * sizeof(float), cudaMemcpyDeviceToDevice)); });
  const double ceiling = 2 * bytes1 / (copy * 1e-3) / 1e9;
  std::printf("copy (cudaMemcpy D2D, 1 GiB): %.4f ms, %.0f GB/s = the ceiling\n", copy, ceiling);
  auto report = [&](const char* what, double streams, float ms) {
    const double gbps = streams * bytes1 / (ms * 1e-3) / 1e9;
    std::printf("%-44s %8.4f ms %6.0f GB/s %6.1f%%\n", what, ms, gbps, 100 * gbps / ceiling);
  };
  auto a4 = [&](int i) { return reinterpret_cast<float4*>(buf[i]); };
#define ONESHOT(TPB, U, L)                                                                                  \
  report("mul fwd one-shot TPB=" #TPB " U=" #U " " #L, 3, median_ms([&] {                                  \
           mul_oneshot<TPB, U, L><<<(n4 + TPB * U - 1) / (TPB * U), TPB>>>(a4(0), a4(1), a4(2), n4);      \
         }))
  report("mul fwd scalar (1 float/thread, 256)", 3,
         median_ms([&] { mul_scalar<<<(n + 255) / 256, 256>>>(buf[0], buf[1], buf[2], n); }));
  ONESHOT(128, 1, kPlain);
  ONESHOT(256, 1, kPlain);
  ONESHOT(512, 1, kPlain);
  ONESHOT(128, 2, kPlain);
  ONESHOT(256, 2, kPlain);
  ONESHOT(256, 4, kPlain);
  ONESHOT(256, 4, kStream);
  ONESHOT(256, 4, kNc);
  ONESHOT(128, 4, kPlain);
  ONESHOT(256, 2, kStream);
  ONESHOT(256, 1, kStream);
  ONESHOT(256, 8, kPlain);
  report("mul fwd one-shot int32 TPB=256 U=1", 3, median_ms([&] {
           mul_oneshot32<256, 1><<<(n4 + 255) / 256, 256>>>(a4(0), a4(1), a4(2), static_cast<int>(n4));
         }));
  report("mul fwd one-shot int32 TPB=128 U=2", 3, median_ms([&] {
           mul_oneshot32<128, 2><<<(n4 + 255) / 256, 128>>>(a4(0), a4(1), a4(2), static_cast<int>(n4));
         }));
  report("mul fwd one-shot int64 TPB=256 U=1 (again)", 3, median_ms([&] {
           mul_oneshot<256, 1, kPlain><<<(n4 + 255) / 256, 256>>>(a4(0), a4(1), a4(2), n4);
         }));
#define STRIDE(TPB, U, L, K)                                                                                \
  report("mul fwd grid-stride " #K "xSMs TPB=" #TPB " U=" #U " " #L, 3,                                     \
         median_ms([&] { mul_stride<TPB, U, L><<<K * sms, TPB>>>(a4(0), a4(1), a4(2), n4); }))
  STRIDE(256, 1, kPlain, 8);
  STRIDE(256, 2, kPlain, 8);
  STRIDE(256, 4, kPlain, 8);
  STRIDE(512, 2, kPlain, 4);
  STRIDE(256, 2, kStream, 8);
#define GRAD(TPB, U, L)                                                                                     \
  report("mul bwd one-shot TPB=" #TPB " U=" #U " " #L, 5, median_ms([&] {                                  \
           mulgrad_oneshot<TPB, U, L><<<(n4 + TPB * U - 1) / (TPB * U), TPB>>>(a4(0), a4(1), a4(2), a4(3), a4(4), n4); \
         }))
  report("mul bwd scalar (1 float/thread, 256)", 5,
         median_ms([&] { mulgrad_scalar<<<(n + 255) / 256, 256>>>(buf[0], buf[1], buf[2], buf[3], buf[4], n); }));
  GRAD(128, 1, kPlain);
  GRAD(256, 1, kPlain);
  GRAD(256, 2, kPlain);
  GRAD(256, 4, kPlain);
  GRAD(256, 4, kStream);
  GRAD(256, 1, kStream);
  GRAD(128, 2, kPlain);
  // scale_bias_relu forward: the row tiles (as vec4.cu calls them) against flat grids.
  WbLaunch launch{};
  launch.num_sms = sms;
  report("sbr fwd row tiles (wb_row_tiles, V=4)", 2, median_ms([&] {
           wb_row_tiles::forward<float, 4>(buf[0], bias, buf[1], rows, cols, WbScaleBiasRelu<float>{2.f}, &launch);
         }));
#define SBR(TPB, U, L)                                                                                      \
  report("sbr fwd flat TPB=" #TPB " U=" #U " " #L, 2, median_ms([&] {                                      \
           sbr_flat<TPB, U, L><<<(n4 + TPB * U - 1) / (TPB * U), TPB>>>(a4(0), bias, a4(1), n4, cols / 4, 2.f); \
         }))
  SBR(256, 1, kPlain);
  SBR(256, 2, kPlain);
  SBR(256, 4, kPlain);
  SBR(256, 4, kStream);
  SBR(128, 2, kPlain);
  SBR(512, 1, kPlain);
  std::printf("copy again: %.4f ms\n",
              median_ms([&] { CHECK(cudaMemcpyAsync(buf[1], buf[0], n * sizeof(float), cudaMemcpyDeviceToDevice)); }));
  return 0;
}

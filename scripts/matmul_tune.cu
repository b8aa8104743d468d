// Tile-plan sweep for the matmul rungs that take a plan (warptile, tensor_core): the rung's own
// kernel, compiled here with other plans, timed on square GEMMs, each plan's output compared with
// the rung's shipped plan. The plans kept in the rung files were picked from this program's output
// (results/gpu/<commit>/matmul_tune.log); scripts/matmul_tune.sh builds and runs it on the GPU.
//   nvcc -std=c++17 -O3 -arch=sm_90 -Ikernels/common -Ikernels/matmul -DTUNE_TENSOR_CORE scripts/matmul_tune.cu
//   ./a.out 4096 8192
// Without TUNE_TENSOR_CORE it sweeps warptile's float32 plans.
#define WB_MATMUL_TUNING  // the rung file without its variant export: this is a program, not a variant
#ifdef TUNE_TENSOR_CORE
#include "../kernels/matmul/tensor_core.cu"
#else
#include "../kernels/matmul/warptile.cu"
#endif

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>

namespace {

#ifdef TUNE_TENSOR_CORE
using Elem = wb_bf16_t;
const char* const kDtype = "bfloat16";
// (BM, BN, BK, WM, WN, STAGES[, GROUP[, PREFETCH]])
#define WB_TUNE_PLANS(X)                   \
  X(Plan<128, 128, 64, 64, 64, 3, 8, false>) \
  X(Plan<128, 256, 64, 64, 64, 3, 8, false>) \
  X(Plan<128, 128, 32, 64, 32, 3>)         \
  X(Plan<128, 128, 64, 64, 32, 3>)         \
  X(Plan<128, 128, 32, 64, 64, 3>)         \
  X(Plan<128, 128, 32, 64, 64, 4>)         \
  X(Plan<128, 128, 64, 64, 64, 3>)         \
  X(Plan<128, 128, 64, 64, 64, 4>)         \
  X(Plan<128, 256, 32, 64, 64, 3>)         \
  X(Plan<128, 256, 32, 64, 64, 4>)         \
  X(Plan<128, 256, 64, 64, 64, 3>)         \
  X(Plan<256, 128, 64, 64, 64, 3>)         \
  X(Plan<128, 256, 64, 64, 64, 4>)         \
  X(Plan<256, 128, 64, 64, 64, 4>)         \
  X(Plan<192, 256, 64, 96, 64, 3>)         \
  X(Plan<192, 256, 64, 96, 64, 3, 8, false>) \
  X(Plan<192, 256, 32, 96, 64, 4>)         \
  X(Plan<256, 128, 128, 64, 64, 2>)        \
  X(Plan<128, 256, 128, 64, 64, 2>)        \
  X(Plan<256, 128, 128, 64, 64, 2, 16>)    \
  X(Plan<256, 128, 64, 64, 32, 3>)         \
  X(Plan<256, 128, 64, 64, 32, 3, 8, false>) \
  X(Plan<256, 128, 32, 64, 32, 4>)         \
  X(Plan<128, 256, 64, 32, 64, 3>)
#else
using Elem = float;
const char* const kDtype = "float32";
// (BM, BN, BK, WM, WN, WNITER, TM, TN, STAGES[, MIN_BLOCKS])
#define WB_TUNE_PLANS(X)                            \
  X(Plan<128, 128, 16, 64, 64, 4, 8, 4, 1>)         \
  X(Plan<128, 128, 16, 64, 64, 4, 8, 4, 2>)         \
  X(Plan<128, 128, 8, 64, 64, 4, 8, 4, 2>)          \
  X(Plan<128, 128, 16, 64, 64, 2, 8, 8, 2>)         \
  X(Plan<128, 128, 16, 64, 32, 2, 8, 4, 2>)         \
  X(Plan<128, 128, 16, 32, 64, 2, 8, 4, 2>)         \
  X(Plan<128, 128, 8, 32, 64, 2, 8, 4, 2>)          \
  X(Plan<128, 128, 8, 64, 32, 2, 8, 4, 2>)          \
  X(Plan<128, 256, 16, 64, 64, 4, 8, 4, 2>)         \
  X(Plan<256, 128, 16, 64, 64, 4, 8, 4, 2>)         \
  X(Plan<128, 256, 8, 64, 64, 4, 8, 4, 2>)          \
  X(Plan<128, 256, 16, 64, 64, 2, 8, 8, 2>)         \
  X(Plan<128, 128, 16, 64, 64, 4, 8, 4, 2, 3>)
#endif

#define WB_CHECK(call)                                                                        \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__device__ inline float to_float_dev(wb_bf16_t x) { return wb_to_acc(x); }
[[maybe_unused]] __device__ inline float to_float_dev(float x) { return x; }

// Uniform values in [-1, 1) from a hash of the index: the same inputs on every run.
template <typename T>
__global__ void fill(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    x[i] = wb_from_acc<T>(static_cast<float>(h >> 8) / 8388608.0f - 1.0f);
  }
}

// max |x - ref| / max |ref| over the matrix, into out[0] (as ordered ints: values are >= 0)
template <typename T>
__global__ void max_diff(const T* x, const T* ref, int64_t n, float* out) {
  float d = 0, r = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    d = fmaxf(d, fabsf(to_float_dev(x[i]) - to_float_dev(ref[i])));
    r = fmaxf(r, fabsf(to_float_dev(ref[i])));
  }
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(d));
  atomicMax(reinterpret_cast<int*>(out) + 1, __float_as_int(r));
}

struct Buffers {
  Elem *a, *b, *c, *ref;
  float* diff;
};

template <class Gemm>
float time_ms(const matmul::Gemm<Elem>& g, int reps) {
  cudaEvent_t start, stop;
  WB_CHECK(cudaEventCreate(&start));
  WB_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    WB_CHECK(cudaEventRecord(start));
    const int status = Gemm::template gemm<Elem, false, false>(g, nullptr);
    WB_CHECK(cudaEventRecord(stop));
    WB_CHECK(cudaEventSynchronize(stop));
    if (status != 0) {
      std::fprintf(stderr, "launch failed: status %d\n", status);
      std::exit(1);
    }
    float t = 0;
    WB_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (r >= 0) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <class P>
void run_plan(const char* name, const Buffers& buf, int64_t size) {
  const matmul::Gemm<Elem> g{size, size, size, buf.a, size, buf.b, size, buf.c};
  const double flop = 2.0 * size * size * size;
  const int reps = std::max(3, static_cast<int>(2e13 / flop / (sizeof(Elem) == 4 ? 1 : 10)));
  WB_CHECK(cudaMemset(buf.c, 0xff, size * size * sizeof(Elem)));  // poisoned: NaN until written
  const float ms = time_ms<Tiled<P>>(g, reps);
  WB_CHECK(cudaMemset(buf.diff, 0, 2 * sizeof(float)));
  max_diff<<<1024, 256>>>(buf.c, buf.ref, size * size, buf.diff);
  float diff[2];
  WB_CHECK(cudaMemcpy(diff, buf.diff, sizeof diff, cudaMemcpyDeviceToHost));
  const int smem = []() {
#ifdef TUNE_TENSOR_CORE
    return smem_bytes<P, false, false>();
#else
    return P::kStages * P::BK * (P::BM + P::BN) * 4;
#endif
  }();
  cudaFuncAttributes attr;
#ifdef TUNE_TENSOR_CORE
  WB_CHECK(cudaFuncGetAttributes(&attr, tensor_core_kernel<P, Elem, false, false, true>));
#else
  WB_CHECK(cudaFuncGetAttributes(&attr, warptile_kernel<P, Elem, false, false, 4>));
#endif
  std::printf("tune %s %s size=%lld ms=%.4f tflops=%.1f regs=%d smem=%d threads=%d reps=%d rel_diff=%.2e%s\n", kDtype,
              name, static_cast<long long>(size), ms, flop / ms / 1e9, attr.numRegs, smem, P::kThreads, reps,
              diff[0] / diff[1], std::isfinite(diff[0]) && diff[0] / diff[1] < 1e-2 ? "" : " WRONG");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {4096, 8192};
  const int64_t most = *std::max_element(sizes.begin(), sizes.end());
  Buffers buf{};
  for (Elem** p : {&buf.a, &buf.b, &buf.c, &buf.ref}) WB_CHECK(cudaMalloc(p, most * most * sizeof(Elem)));
  WB_CHECK(cudaMalloc(&buf.diff, 2 * sizeof(float)));
  for (int64_t size : sizes) {
    fill<<<1024, 256>>>(buf.a, size * size, 1);
    fill<<<1024, 256>>>(buf.b, size * size, 2);
    // The reference: the rung's shipped plan (the one the tests check against float64).
    const matmul::Gemm<Elem> g{size, size, size, buf.a, size, buf.b, size, buf.ref};
    if (Rung::gemm<Elem, false, false>(g, nullptr) != 0) return 1;
    WB_CHECK(cudaDeviceSynchronize());
#define WB_TUNE_RUN(...) run_plan<__VA_ARGS__>(#__VA_ARGS__, buf, size);
    WB_TUNE_PLANS(WB_TUNE_RUN)
  }
  return 0;
}

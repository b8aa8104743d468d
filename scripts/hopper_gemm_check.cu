// The Hopper rungs' fast loop (issue 28): loads each rung's variant library (built by
// scripts/hopper_gemm_check.sh from kernels/matmul/<rung>.cu, exactly as exported), and
//   check: forward (N/N) and backward (N/T da, T/N db) against a float reference kernel, fp16 and
//          bf16, at tails of every tile, odd and unit k, aligned and unaligned rows (both routes),
//          repeated bit for bit; one output past 2^31 elements (its last rows checked);
//   bench: the forward against cuBLAS (cublasGemmEx, float accumulation) at the issue's sizes,
//          median of timed repeats after warm-ups, cuEvents; each size's output compared with cuBLAS's;
//   one:MxKxN: a single bf16 forward per library, for Nsight Compute.
// Usage: hopper_gemm_check {check|bench|big|one:MxKxN} lib.so...
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "matmul.h"

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

__device__ float to_f(uint16_t v, bool bf) {
  if (bf) return __uint_as_float(static_cast<unsigned>(v) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}
__device__ uint16_t from_f(float v, bool bf) {
  uint16_t h;
  if (bf) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}

__global__ void fill(uint16_t* x, int64_t n, uint64_t seed, bool bf) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29;
    x[i] = from_f(static_cast<float>(h % 2001) / 1000.f - 1.f, bf);
  }
}

// C[m, n] = op(A) op(B) in float, C as float; rows [r0, r0 + rows) only.
__global__ void ref_gemm(const uint16_t* a, int64_t lda, bool ta, const uint16_t* b, int64_t ldb, bool tb, float* c,
                         int64_t r0, int64_t rows, int64_t n, int64_t k, bool bf) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= n || i >= rows) return;
  const int64_t r = r0 + i;
  float s = 0.f;
  for (int64_t p = 0; p < k; ++p)
    s += to_f(ta ? a[p * lda + r] : a[r * lda + p], bf) * to_f(tb ? b[j * ldb + p] : b[p * ldb + j], bf);
  c[i * n + j] = s;
}

// max |y - ref| / max |ref| over rows [r0, r0 + rows) of y (ld n).
__global__ void compare(const uint16_t* y, const float* ref, int64_t r0, int64_t rows, int64_t n, bool bf, float* out) {
  float err = 0.f, mag = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = to_f(y[r0 * n + i], bf), r = ref[i];
    err = fmaxf(err, (v == v) ? fabsf(v - r) : INFINITY);
    mag = fmaxf(mag, fabsf(r));
  }
  atomicMax(reinterpret_cast<int*>(&out[0]), __float_as_int(err));
  atomicMax(reinterpret_cast<int*>(&out[1]), __float_as_int(mag));
}

// max |y - r| / max |r| over n values, both 16-bit
__global__ void compare16(const uint16_t* y, const uint16_t* r, int64_t n, bool bf, float* out) {
  float err = 0.f, mag = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = to_f(y[i], bf), x = to_f(r[i], bf);
    err = fmaxf(err, (v == v) ? fabsf(v - x) : INFINITY);
    mag = fmaxf(mag, fabsf(x));
  }
  atomicMax(reinterpret_cast<int*>(&out[0]), __float_as_int(err));
  atomicMax(reinterpret_cast<int*>(&out[1]), __float_as_int(mag));
}

struct Lib {
  std::string name;
  const WbVariantInfo* info;
  const WbMatmulLaunchers* l;
};

WbLaunch launch_args() {
  WbLaunch w{};
  w.stream = nullptr;
  cudaGetDevice(&w.device);
  cudaDeviceGetAttribute(&w.num_sms, cudaDevAttrMultiProcessorCount, w.device);
  return w;
}

uint16_t* dev16(int64_t n, uint64_t seed, bool bf) {
  uint16_t* p;
  CK(cudaMalloc(&p, std::max<int64_t>(n, 1) * 2 + 64));
  fill<<<1024, 256>>>(p, n, seed, bf);
  return p;
}

// rel error of y (rows r0.., ld n) against op(A) op(B)
float check_one(const uint16_t* y, const uint16_t* a, int64_t lda, bool ta, const uint16_t* b, int64_t ldb, bool tb,
                int64_t m, int64_t n, int64_t k, bool bf, int64_t r0 = 0, int64_t rows = -1) {
  if (rows < 0) rows = m;
  float *ref, *out;
  CK(cudaMalloc(&ref, rows * n * 4));
  CK(cudaMalloc(&out, 8));
  CK(cudaMemset(out, 0, 8));
  ref_gemm<<<dim3((n + 127) / 128, rows), 128>>>(a, lda, ta, b, ldb, tb, ref, r0, rows, n, k, bf);
  compare<<<1024, 256>>>(y, ref, r0, rows, n, bf, out);
  float h[2];
  CK(cudaMemcpy(h, out, 8, cudaMemcpyDeviceToHost));
  cudaFree(ref);
  cudaFree(out);
  return h[0] / std::max(h[1], 1e-6f);
}

int run_check(const std::vector<Lib>& libs) {
  const int64_t shapes[][3] = {{1, 1, 1},       {3, 5, 7},        {127, 129, 131},  {6, 1, 9},       {64, 1000, 33},
                               {1000, 3, 127},  {257, 4095, 65},  {4095, 33, 17},   {128, 64, 128},  {256, 256, 256},
                               {200, 136, 264}, {1000, 1024, 1000}, {129, 72, 136}, {8, 8, 8},       {64, 4096, 64},
                               {333, 520, 8},   {1024, 8, 2048},  {2048, 2048, 2048}, {1536, 776, 2056}};
  WbLaunch w = launch_args();
  int failures = 0;
  for (const Lib& lib : libs) {
    for (int bfi = 0; bfi < 2; ++bfi) {
      const bool bf = bfi == 0;
      const int dtype = bf ? WB_BFLOAT16 : WB_FLOAT16;
      float worst = 0.f;
      for (auto& s : shapes) {
        const int64_t m = s[0], k = s[1], n = s[2];
        for (int off = 0; off < 2; ++off) {  // off = 1: every operand one value past an aligned base
          uint16_t *a = dev16(m * k + 8, 11 + m, bf), *b = dev16(k * n + 8, 22 + n, bf), *dy = dev16(m * n + 8, 33 + k, bf);
          uint16_t *y, *da, *db, *y2;
          CK(cudaMalloc(&y, (m * n + 8) * 2)); CK(cudaMalloc(&y2, (m * n + 8) * 2));
          CK(cudaMalloc(&da, (m * k + 8) * 2)); CK(cudaMalloc(&db, (k * n + 8) * 2));
          WbMatmulForward f{dtype, m, k, n, a + off, b + off, y + off};
          int st = lib.l->forward(&f, &w);
          WbMatmulForward f2{dtype, m, k, n, a + off, b + off, y2 + off};
          if (st == 0) st = lib.l->forward(&f2, &w);
          WbMatmulBackward bw{dtype, m, k, n, dy + off, a + off, b + off, da + off, db + off, nullptr};
          if (st == 0) st = lib.l->backward(&bw, &w);
          CK(cudaDeviceSynchronize());
          if (st != 0) {
            std::printf("FAIL %s m=%ld k=%ld n=%ld: status %d (%s)\n", lib.name.c_str(), (long)m, (long)k, (long)n, st,
                        lib.info->status_string(st));
            ++failures;
            continue;
          }
          const float ey = check_one(y + off, a + off, k, false, b + off, n, false, m, n, k, bf);
          const float eda = check_one(da + off, dy + off, n, false, b + off, n, true, m, k, n, bf);
          const float edb = check_one(db + off, a + off, k, true, dy + off, n, false, k, n, m, bf);
          std::vector<uint16_t> h1(m * n), h2(m * n);
          CK(cudaMemcpy(h1.data(), y + off, m * n * 2, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(h2.data(), y2 + off, m * n * 2, cudaMemcpyDeviceToHost));
          const bool same = std::memcmp(h1.data(), h2.data(), m * n * 2) == 0;
          const float e = std::max({ey, eda, edb});
          worst = std::max(worst, e);
          if (!(e < 1e-2f) || !same) {
            std::printf("FAIL %s %s m=%ld k=%ld n=%ld off=%d: rel err y %.3g da %.3g db %.3g, repeat %s\n",
                        lib.name.c_str(), bf ? "bf16" : "fp16", (long)m, (long)k, (long)n, off, ey, eda, edb,
                        same ? "same" : "DIFFERS");
            ++failures;
          }
          cudaFree(a); cudaFree(b); cudaFree(dy); cudaFree(y); cudaFree(y2); cudaFree(da); cudaFree(db);
        }
      }
      std::printf("check %s %s: %zu shapes x 2 alignments, fwd+bwd, worst rel err %.3g\n", lib.name.c_str(),
                  bf ? "bfloat16" : "float16", sizeof(shapes) / sizeof(shapes[0]), worst);
    }
  }
  std::printf("check: %d failures\n", failures);
  return failures;
}

// An output past 2^31 elements: m = 65600, n = 32776 (2.15e9 values), k = 64; last and first rows checked.
int run_big(const std::vector<Lib>& libs) {
  const int64_t m = 65600, n = 32776, k = 64;
  WbLaunch w = launch_args();
  int failures = 0;
  uint16_t *a = dev16(m * k, 1, true), *b = dev16(k * n, 2, true), *y;
  CK(cudaMalloc(&y, m * n * 2));
  for (const Lib& lib : libs) {
    CK(cudaMemset(y, 0xff, m * n * 2));
    WbMatmulForward f{WB_BFLOAT16, m, k, n, a, b, y};
    const int st = lib.l->forward(&f, &w);
    CK(cudaDeviceSynchronize());
    const float e1 = st ? 1.f : check_one(y, a, k, false, b, n, false, m, n, k, true, m - 40, 40);
    const float e0 = st ? 1.f : check_one(y, a, k, false, b, n, false, m, n, k, true, 0, 8);
    const bool ok = st == 0 && e1 < 1e-2f && e0 < 1e-2f;
    failures += !ok;
    std::printf("big %s m=%ld k=%ld n=%ld (%.3g values): status %d, rel err last rows %.3g first rows %.3g %s\n",
                lib.name.c_str(), (long)m, (long)k, (long)n, double(m) * n, st, e1, e0, ok ? "ok" : "FAIL");
  }
  cudaFree(a); cudaFree(b); cudaFree(y);
  return failures;
}

template <typename F>
float median_ms(F f, int reps) {
  cudaEvent_t s, e;
  cudaEventCreate(&s);
  cudaEventCreate(&e);
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(s);
    f();
    cudaEventRecord(e);
    cudaEventSynchronize(e);
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run_bench(const std::vector<Lib>& libs, const std::vector<std::vector<int64_t>>& sizes) {
  cublasHandle_t h;
  cublasCreate(&h);
  WbLaunch w = launch_args();
  for (int bfi = 0; bfi < 2; ++bfi) {
    const bool bf = bfi == 0;
    const cudaDataType_t ct = bf ? CUDA_R_16BF : CUDA_R_16F;
    for (auto& s : sizes) {
      const int64_t m = s[0], k = s[1], n = s[2];
      const double flop = 2.0 * m * n * k;
      const int reps = std::max(5, std::min(50, int(2e13 / flop)));
      uint16_t *a = dev16(m * k, 5, bf), *b = dev16(k * n, 6, bf), *y, *yref;
      CK(cudaMalloc(&y, m * n * 2));
      CK(cudaMalloc(&yref, m * n * 2));
      const float one = 1.f, zero = 0.f;
      auto cub = [&] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, ct, n, a, ct, k, &zero, yref, ct, n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      const float cms = median_ms(cub, reps);
      std::printf("bench %s %ldx%ldx%ld cuBLAS %.4f ms %.1f TFLOP/s\n", bf ? "bfloat16" : "float16", (long)m, (long)k,
                  (long)n, cms, flop / cms / 1e9);
      for (const Lib& lib : libs) {
        WbMatmulForward f{bf ? WB_BFLOAT16 : WB_FLOAT16, m, k, n, a, b, y};
        int st = 0;
        const float ms = median_ms([&] { st |= lib.l->forward(&f, &w); }, reps);
        CK(cudaDeviceSynchronize());
        // against cuBLAS's output, relative to its largest value
        float* out;
        CK(cudaMalloc(&out, 8));
        CK(cudaMemset(out, 0, 8));
        compare16<<<1024, 256>>>(y, yref, m * n, bf, out);
        float e[2];
        CK(cudaMemcpy(e, out, 8, cudaMemcpyDeviceToHost));
        cudaFree(out);
        const float err = e[0] / std::max(e[1], 1e-6f);
        std::printf("bench %s %ldx%ldx%ld %s %.4f ms %.1f TFLOP/s %.3fx cuBLAS, rel diff from cuBLAS %.2g%s\n",
                    bf ? "bfloat16" : "float16", (long)m, (long)k, (long)n, lib.name.c_str(), ms, flop / ms / 1e9,
                    cms / ms, err, st ? " (STATUS ERROR)" : err < 1e-2f ? "" : " (DIFFERS)");
      }
      cudaFree(a); cudaFree(b); cudaFree(y); cudaFree(yref);
    }
  }
  cublasDestroy(h);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::printf("usage: %s {check|bench|big} lib.so...\n", argv[0]);
    return 2;
  }
  std::vector<Lib> libs;
  for (int i = 2; i < argc; ++i) {
    void* h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::printf("dlopen %s: %s\n", argv[i], dlerror());
      return 2;
    }
    auto fn = reinterpret_cast<const WbVariantInfo* (*)()>(dlsym(h, "workbench_variant_info"));
    std::string name = argv[i];
    name = name.substr(name.rfind('/') + 1);
    name = name.substr(0, name.find('.'));
    const WbVariantInfo* info = fn();
    libs.push_back({name, info, static_cast<const WbMatmulLaunchers*>(info->launchers)});
  }
  const std::string mode = argv[1];
  if (mode == "check") return run_check(libs) != 0;
  if (mode.rfind("one:", 0) == 0) {  // one:MxKxN: one bf16 forward per library (for a profiler)
    long m, k, n;
    if (std::sscanf(mode.c_str(), "one:%ldx%ldx%ld", &m, &k, &n) != 3) return 2;
    WbLaunch w = launch_args();
    uint16_t *a = dev16(m * k, 5, true), *b = dev16(k * n, 6, true), *y;
    CK(cudaMalloc(&y, m * n * 2));
    for (const Lib& lib : libs) {
      WbMatmulForward f{WB_BFLOAT16, m, k, n, a, b, y};
      const int st = lib.l->forward(&f, &w);
      CK(cudaDeviceSynchronize());
      std::printf("one %s %ldx%ldx%ld: status %d\n", lib.name.c_str(), m, k, n, st);
    }
    return 0;
  }
  if (mode == "big") return run_big(libs) != 0;
  std::vector<std::vector<int64_t>> sizes = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 4096, 4096},
                                             {8192, 8192, 28672}, {512, 4096, 512}};
  return run_bench(libs, sizes);
}

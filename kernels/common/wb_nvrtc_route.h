// The NVRTC tier's host side (workbench/build/nvrtc_tier.py): the host compiler reads this first
// (-include) when it compiles a variant's host view (workbench/build/nvrtc_split.py): the file with
// its device function bodies emptied, each kernel's body a launch of itself (launch_here), and each
// `kernel<<<grid, block, smem, stream>>>(args)` written `(configure(grid, block, smem, stream),
// kernel(args))`: the call deduces a template kernel's arguments and converts the values as a launch
// does. The device code is NVRTC's, a cubin per kernel.
//
// The first time a kernel is launched, or named to one of the runtime calls below, the loader's
// provider (run/nvrtc_routes.py, set through wb_nvrtc_set_provider) is asked for its cubin by an
// offset in the kernel's code in this library, and compiles it if need be; the cubin is loaded with
// cudaLibraryLoadFromFile and the kernel found by NVRTC's name for it. The runtime takes that
// cudaKernel_t wherever it takes a kernel, so launches, attributes, occupancy and launch errors are
// the runtime's own. It is all in an anonymous namespace: each library's table is its own.
#pragma once
// A kernel's host function stays a function of its own, its code where its symbol says (noipa: not
// inlined, nor cloned); defined before cuda_runtime.h, which then leaves it.
#define __global__ __attribute__((noinline, noipa))
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define __launch_bounds__(...)  // read by NVRTC; the host has no use for it

namespace {
namespace wb_route {

// (an offset in the kernel's code in this library, cubin path out, its size, NVRTC's name out, its
// size) -> 0; 1 with the reason in the path's buffer; 2 where the offset is in no kernel of it.
typedef int (*Provider)(size_t, char*, size_t, char*, size_t);
Provider provider = nullptr;
pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
const void* hosts[4096];
cudaKernel_t kernels[4096];
int found = 0;
thread_local cudaError_t pending = cudaSuccess;  // a kernel that could not be had, for cudaGetLastError

// The cudaKernel_t of the kernel whose host code `host` points at; the pointer itself where it is in
// no kernel of this library; nullptr (and `pending` set) where the kernel cannot be had.
inline const void* kernel(const void* host) {
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < found; ++i) {
    if (hosts[i] == host) {
      pthread_mutex_unlock(&mutex);
      return kernels[i];
    }
  }
  pthread_mutex_unlock(&mutex);  // the provider may compile for a while: other launches go on
  Dl_info info, own;
  char path[4096] = "no provider: load the library with wb.load_source or wb.load_inline", name[4096] = "";
  const bool ours = dladdr(host, &info) && dladdr(reinterpret_cast<const void*>(&kernel), &own) &&
                    info.dli_fbase == own.dli_fbase;
  const int status = !ours ? 2 : !provider ? 1 :
      provider(static_cast<const char*>(host) - static_cast<const char*>(info.dli_fbase), path, sizeof path, name,
               sizeof name);
  if (status == 2) return host;
  cudaLibrary_t library;
  cudaKernel_t k = nullptr;
  if (status == 0 && (cudaLibraryLoadFromFile(&library, path, nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess ||
                      cudaLibraryGetKernel(&k, library, name) != cudaSuccess))
    snprintf(path + strlen(path), sizeof path - strlen(path), " cannot be loaded, or has no %s", name);
  if (!k) {
    fprintf(stderr, "workbench: a kernel of an NVRTC tier library: %s\n", path);
    pending = cudaErrorInvalidKernelImage;
    return nullptr;
  }
  pthread_mutex_lock(&mutex);
  if (found < 4096) hosts[found] = host, kernels[found++] = k;
  pthread_mutex_unlock(&mutex);
  return k;
}

struct Config {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  bool set;
};
thread_local Config config{};

inline void configure(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
  config = {grid, block, smem, stream, true};
}

// An argument of a runtime call: a kernel (its host function) becomes its cudaKernel_t; a function
// that is no kernel of this library, nullptr (which the runtime refuses); any other pointer stays.
template <typename T> T arg(T v) { return v; }
inline const void* arg(const void* f) { return kernel(f); }
inline const void* arg(void* f) { return kernel(f); }
template <typename... P> const void* arg(void (*f)(P...)) {
  const void* k = kernel(reinterpret_cast<const void*>(f));
  return k == reinterpret_cast<const void*>(f) ? nullptr : k;
}

// A kernel's body: `here` is an address in its own code, `p` its parameters.
template <typename... P>
void launch_here(const void* here, const P&... p) {
  void* args[] = {const_cast<void*>(static_cast<const void*>(&p))..., nullptr};
  const Config c = config;
  config.set = false;
  const void* k = c.set ? kernel(here) : nullptr;
  if (!c.set) pending = cudaErrorMissingConfiguration;  // called, not launched
  else if (k == here) pending = cudaErrorInvalidDeviceFunction;  // in no kernel of this library
  else if (k) ::cudaLaunchKernel(k, c.grid, c.block, args, c.smem, c.stream);
}

// cudaLaunchKernelEx(config, kernel, args...), the arguments converted as a launch converts them.
template <typename... P, typename... A>
cudaError_t launch_ex(const cudaLaunchConfig_t* c, void (*host)(P...), A&&... a) {
  return [&](P... p) {
    void* args[] = {const_cast<void*>(static_cast<const void*>(&p))..., nullptr};
    return ::cudaLaunchKernelExC(c, arg(host), args);
  }(static_cast<A&&>(a)...);
}

inline cudaError_t last_error(cudaError_t (*runtime)(), bool clear) {
  const cudaError_t ours = pending, theirs = runtime();
  if (clear) pending = cudaSuccess;
  return ours != cudaSuccess ? ours : theirs;
}

}  // namespace wb_route
}  // namespace

// The runtime calls that take a kernel, given its cudaKernel_t.
#define WB_ROUTE(name)                                                                \
  namespace {                                                                         \
  namespace wb_route {                                                                \
  template <typename... A> cudaError_t name(A... a) { return ::name(arg(a)...); }     \
  }                                                                                   \
  }
WB_ROUTE(cudaLaunchKernel)
WB_ROUTE(cudaLaunchKernelExC)
WB_ROUTE(cudaLaunchCooperativeKernel)
WB_ROUTE(cudaFuncSetAttribute)
WB_ROUTE(cudaFuncGetAttributes)
WB_ROUTE(cudaOccupancyMaxActiveBlocksPerMultiprocessor)
WB_ROUTE(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
WB_ROUTE(cudaOccupancyMaxActiveClusters)
WB_ROUTE(cudaOccupancyMaxPotentialBlockSize)
#undef WB_ROUTE
#define cudaLaunchKernel wb_route::cudaLaunchKernel
#define cudaLaunchKernelEx wb_route::launch_ex
#define cudaLaunchKernelExC wb_route::cudaLaunchKernelExC
#define cudaLaunchCooperativeKernel wb_route::cudaLaunchCooperativeKernel
#define cudaFuncSetAttribute wb_route::cudaFuncSetAttribute
#define cudaFuncGetAttributes wb_route::cudaFuncGetAttributes
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor wb_route::cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags \
  wb_route::cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
#define cudaOccupancyMaxActiveClusters wb_route::cudaOccupancyMaxActiveClusters
#define cudaOccupancyMaxPotentialBlockSize wb_route::cudaOccupancyMaxPotentialBlockSize
#define cudaGetLastError() wb_route::last_error(::cudaGetLastError, true)
#define cudaPeekAtLastError() wb_route::last_error(::cudaPeekAtLastError, false)

// The loader's provider (run/nvrtc_routes.py), set once per library after it is loaded.
extern "C" __attribute__((visibility("default"))) void wb_nvrtc_set_provider(wb_route::Provider p) {
  wb_route::provider = p;
}

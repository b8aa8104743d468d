// The NVRTC tier's launch routing (workbench/build/nvrtc_tier.py), compiled into a variant's host
// library when it is built with -DWB_NVRTC_ROUTED (wb_cuda.h includes this file then, once per
// library: a variant is one translation unit).
//
// That library is nvcc's build of the file's host view: its kernels are empty. The device code is
// NVRTC's, one cubin per kernel, compiled when first launched (or before, in the background:
// workbench/build/nvrtc_kernels.py). The loader registers a provider with each such library
// (wb_nvrtc_set_provider, run/nvrtc_routes.py): given a kernel's name (nvcc's, canonical_name'd below:
// nvcc and NVRTC name an anonymous namespace differently) it returns the kernel's cubin file and
// NVRTC's name for it, compiling it first if need be. The CUDA runtime calls that take a kernel are
// defined here again, with hidden visibility: every call in this library (the <<<>>> stubs nvcc
// generates included) binds to them, and no other library sees them. Each finds the kernel's name
// (cudaGetFuncBySymbol + cuFuncGetName), asks the provider, loads the cubin (per device, once) and
// calls the driver API; the driver is reached through cudaGetDriverEntryPointByVersion, so nothing
// links libcuda. A launch error is kept for the next cudaGetLastError/cudaPeekAtLastError, as the
// runtime keeps its own.
#pragma once
#if defined(WB_NVRTC_ROUTED) && !defined(__CUDACC_RTC__)

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

// The runtime's header declares these (and the device runtime defines some as __device__ functions
// the front end sees): ours have names of their own in C++ and the runtime's names in the object
// file (an asm label), hidden, so the stubs and launchers of this library alone bind to them.
#define WB_ROUTED(name) \
  extern "C" __attribute__((visibility("hidden"))) cudaError_t wb_routed_##name
#define WB_ROUTED_LABEL(name) __asm__(#name)

// An anonymous namespace around it all: each library's state is its own (an inline function's static
// would be one weak symbol that the dynamic linker shares between every library loaded).
namespace {
namespace wb_route {

constexpr int kMaxDevices = 64;

// (nvcc's canonical kernel name, cubin path out, its size, NVRTC's name out, its size): 0 when found;
// else nonzero, with the reason in the cubin path's buffer.
typedef int (*Provider)(const char*, char*, size_t, char*, size_t);

struct Driver {
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*func_get_name)(const char**, CUfunction);
  CUresult (*kernel_get_name)(const char**, CUkernel);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**);
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*func_get_attribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*occupancy)(int*, CUfunction, int, size_t, unsigned);
  CUresult (*occupancy_clusters)(int*, CUfunction, const CUlaunchConfig*);
};

struct State {
  std::once_flag once;
  cudaError_t init_error = cudaSuccess;
  Driver drv{};
  std::atomic<Provider> provider{nullptr};
  std::mutex mutex;
  std::unordered_map<std::string, CUmodule> modules[kMaxDevices];  // cubin path -> its module
  std::unordered_map<const void*, CUfunction> functions[kMaxDevices];
};

inline State& state() {
  static State s;
  return s;
}

// The runtime's own definitions (libcudart), for what this library does not route.
template <typename Fn>
inline Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

inline thread_local cudaError_t pending = cudaSuccess;  // a routed launch's error, for cudaGetLastError

// A kernel's name with its anonymous namespace spelled as GCC does (12_GLOBAL__N_1): nvcc names
// one after the file and a hash that differ between its ptxas report and the library, NVRTC its own
// way. The routes table is keyed the same way (nvrtc_tier.canonical_name).
inline std::string canonical_name(const std::string& name) {
  static const std::string anon = "_GLOBAL__N_";
  std::string out;
  size_t at = 0;
  for (size_t hit = name.find(anon); hit != std::string::npos; hit = name.find(anon, hit + 1)) {
    size_t digits = hit;
    while (digits > at && isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
    if (digits == hit) continue;
    const size_t length = strtoul(name.substr(digits, hit - digits).c_str(), nullptr, 10);
    out += name.substr(at, digits - at) + "12_GLOBAL__N_1";
    at = hit + length;
    hit = at - 1;
  }
  return out + name.substr(at < name.size() ? at : name.size());
}

inline bool read_file(const std::string& path, std::vector<char>* out) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->insert(out->end(), buf, buf + n);
  fclose(f);
  return true;
}

template <typename Fn>
inline bool entry(const char* name, Fn* fn) {
  cudaDriverEntryPointQueryResult found;
  return cudaGetDriverEntryPointByVersion(name, reinterpret_cast<void**>(fn), 12080, cudaEnableDefault, &found) ==
             cudaSuccess && found == cudaDriverEntryPointSuccess;
}

inline void init(State& s) {
  Driver& d = s.drv;
  if (!(entry("cuModuleLoadData", &d.module_load_data) && entry("cuModuleGetFunction", &d.module_get_function) &&
        entry("cuFuncGetName", &d.func_get_name) && entry("cuKernelGetName", &d.kernel_get_name) && entry("cuLaunchKernel", &d.launch_kernel) &&
        entry("cuLaunchKernelEx", &d.launch_kernel_ex) && entry("cuFuncSetAttribute", &d.func_set_attribute) &&
        entry("cuFuncGetAttribute", &d.func_get_attribute) &&
        entry("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", &d.occupancy) &&
        entry("cuOccupancyMaxActiveClusters", &d.occupancy_clusters)))
    s.init_error = cudaErrorCallRequiresNewerDriver;
}

// The module's function for a kernel on the current device: `kernel` is its host stub, or (handle)
// the runtime's cudaKernel_t for it, which CUDA 13's <<<>>> stubs launch through __cudaLaunchKernel.
// The provider runs outside the lock: it may compile for a while, and other kernels launch meanwhile.
inline cudaError_t find(const void* kernel, CUfunction* out, bool handle = false) {
  State& s = state();
  std::call_once(s.once, init, s);
  if (s.init_error != cudaSuccess) return s.init_error;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  {
    std::lock_guard<std::mutex> hold(s.mutex);
    auto hit = s.functions[device].find(kernel);
    if (hit != s.functions[device].end()) {
      *out = hit->second;
      return cudaSuccess;
    }
  }
  const char* name = nullptr;
  cudaFunction_t own;
  const bool named = handle ? s.drv.kernel_get_name(&name, static_cast<CUkernel>(const_cast<void*>(kernel))) == CUDA_SUCCESS
                            : cudaGetFuncBySymbol(&own, kernel) == cudaSuccess &&
                                  s.drv.func_get_name(&name, reinterpret_cast<CUfunction>(own)) == CUDA_SUCCESS;
  if (!named || !name) return cudaErrorInvalidDeviceFunction;
  const Provider provider = s.provider.load();
  if (!provider) {
    fprintf(stderr, "workbench: kernel %s: this NVRTC tier library was loaded without the workbench's loader, "
            "which compiles its kernels (load it with wb.load_source / wb.load_inline)\n", name);
    return cudaErrorInvalidKernelImage;
  }
  char path[4096] = {0}, lowered[4096] = {0};
  if (provider(canonical_name(name).c_str(), path, sizeof path, lowered, sizeof lowered) != 0) {
    fprintf(stderr, "workbench: kernel %s: %s\n", name, path);
    return cudaErrorInvalidKernelImage;
  }
  std::lock_guard<std::mutex> hold(s.mutex);
  CUmodule& module = s.modules[device][path];
  if (!module) {
    std::vector<char> cubin;
    cudaFree(nullptr);  // the runtime's context is current before the module joins it
    if (!read_file(path, &cubin) || s.drv.module_load_data(&module, cubin.data()) != CUDA_SUCCESS) {
      module = nullptr;
      fprintf(stderr, "workbench: kernel %s: its cubin %s cannot be loaded\n", name, path);
      return cudaErrorInvalidKernelImage;
    }
  }
  if (s.drv.module_get_function(out, module, lowered) != CUDA_SUCCESS) {
    fprintf(stderr, "workbench: kernel %s is not in its NVRTC module %s (as %s)\n", name, path, lowered);
    return cudaErrorInvalidDeviceFunction;
  }
  s.functions[device][kernel] = *out;
  return cudaSuccess;
}

inline cudaError_t launched(CUresult r) {
  const cudaError_t e = static_cast<cudaError_t>(r);  // the two enums agree on the launch errors
  if (e != cudaSuccess) pending = e;
  return e;
}

inline CUlaunchConfig driver_config(const cudaLaunchConfig_t* c) {
  CUlaunchConfig d{};
  d.gridDimX = c->gridDim.x, d.gridDimY = c->gridDim.y, d.gridDimZ = c->gridDim.z;
  d.blockDimX = c->blockDim.x, d.blockDimY = c->blockDim.y, d.blockDimZ = c->blockDim.z;
  d.sharedMemBytes = static_cast<unsigned>(c->dynamicSmemBytes);
  d.hStream = reinterpret_cast<CUstream>(c->stream);
  d.attrs = reinterpret_cast<CUlaunchAttribute*>(c->attrs);  // the same layout and ids, by design
  d.numAttrs = c->numAttrs;
  return d;
}

}  // namespace wb_route
}  // namespace

#ifndef __CUDA_ARCH__  // host code; the device pass needs none of it

// Declarations carrying the asm labels (GCC takes a label on a declaration only).
WB_ROUTED(cudaLaunchKernel)(const void*, dim3, dim3, void**, size_t, cudaStream_t) WB_ROUTED_LABEL(cudaLaunchKernel);
WB_ROUTED(__cudaLaunchKernel)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t)
    WB_ROUTED_LABEL(__cudaLaunchKernel);
WB_ROUTED(cudaLaunchKernelExC)(const cudaLaunchConfig_t*, const void*, void**) WB_ROUTED_LABEL(cudaLaunchKernelExC);
WB_ROUTED(cudaFuncSetAttribute)(const void*, cudaFuncAttribute, int) WB_ROUTED_LABEL(cudaFuncSetAttribute);
WB_ROUTED(cudaFuncGetAttributes)(cudaFuncAttributes*, const void*) WB_ROUTED_LABEL(cudaFuncGetAttributes);
WB_ROUTED(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)(int*, const void*, int, size_t, unsigned)
    WB_ROUTED_LABEL(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
WB_ROUTED(cudaOccupancyMaxActiveBlocksPerMultiprocessor)(int*, const void*, int, size_t)
    WB_ROUTED_LABEL(cudaOccupancyMaxActiveBlocksPerMultiprocessor);
WB_ROUTED(cudaOccupancyMaxActiveClusters)(int*, const void*, const cudaLaunchConfig_t*)
    WB_ROUTED_LABEL(cudaOccupancyMaxActiveClusters);
WB_ROUTED(cudaGetLastError)(void) WB_ROUTED_LABEL(cudaGetLastError);
WB_ROUTED(cudaPeekAtLastError)(void) WB_ROUTED_LABEL(cudaPeekAtLastError);

WB_ROUTED(cudaLaunchKernel)(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                             cudaStream_t stream) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(func, &f)) return wb_route::pending = e;
  return wb_route::launched(wb_route::state().drv.launch_kernel(f, grid.x, grid.y, grid.z, block.x, block.y,
                                                                block.z, static_cast<unsigned>(smem),
                                                                reinterpret_cast<CUstream>(stream), args, nullptr));
}

// What CUDA 13's <<<>>> stubs call (crt/host_runtime.h), with the runtime's handle for the kernel.
WB_ROUTED(__cudaLaunchKernel)(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t smem,
                              cudaStream_t stream) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(kernel, &f, true)) return wb_route::pending = e;
  return wb_route::launched(wb_route::state().drv.launch_kernel(f, grid.x, grid.y, grid.z, block.x, block.y,
                                                                block.z, static_cast<unsigned>(smem),
                                                                reinterpret_cast<CUstream>(stream), args, nullptr));
}

WB_ROUTED(cudaLaunchKernelExC)(const cudaLaunchConfig_t* config, const void* func, void** args) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(func, &f)) return wb_route::pending = e;
  const CUlaunchConfig d = wb_route::driver_config(config);
  return wb_route::launched(wb_route::state().drv.launch_kernel_ex(&d, f, args, nullptr));
}

WB_ROUTED(cudaFuncSetAttribute)(const void* func, cudaFuncAttribute attr, int value) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(func, &f)) return e;
  // cudaFuncAttribute 8..15 and CUfunction_attribute 8..15 name the same attributes.
  return static_cast<cudaError_t>(
      wb_route::state().drv.func_set_attribute(f, static_cast<CUfunction_attribute>(attr), value));
}

WB_ROUTED(cudaFuncGetAttributes)(cudaFuncAttributes* attr, const void* func) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(func, &f)) return e;
  auto get = [&](CUfunction_attribute a) {
    int v = 0;
    wb_route::state().drv.func_get_attribute(&v, a, f);
    return v;
  };
  *attr = cudaFuncAttributes{};
  attr->sharedSizeBytes = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  attr->constSizeBytes = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  attr->localSizeBytes = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  attr->maxThreadsPerBlock = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  attr->numRegs = get(CU_FUNC_ATTRIBUTE_NUM_REGS);
  attr->ptxVersion = get(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  attr->binaryVersion = get(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  attr->maxDynamicSharedSizeBytes = get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  attr->preferredShmemCarveout = get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
  return cudaSuccess;
}

WB_ROUTED(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)(int* blocks, const void* func,
                                                                                  int block_size, size_t smem,
                                                                                  unsigned flags) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(func, &f)) return e;
  return static_cast<cudaError_t>(wb_route::state().drv.occupancy(blocks, f, block_size, smem, flags));
}

WB_ROUTED(cudaOccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, const void* func,
                                                                          int block_size, size_t smem) {
  return wb_routed_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, smem, cudaOccupancyDefault);
}

WB_ROUTED(cudaOccupancyMaxActiveClusters)(int* clusters, const void* func,
                                                           const cudaLaunchConfig_t* config) {
  CUfunction f;
  if (cudaError_t e = wb_route::find(func, &f)) return e;
  const CUlaunchConfig d = wb_route::driver_config(config);
  return static_cast<cudaError_t>(wb_route::state().drv.occupancy_clusters(clusters, f, &d));
}

WB_ROUTED(cudaGetLastError)(void) {
  const cudaError_t routed = wb_route::pending;
  wb_route::pending = cudaSuccess;
  const cudaError_t own = wb_route::real<cudaError_t (*)(void)>("cudaGetLastError")();
  return routed != cudaSuccess ? routed : own;
}

WB_ROUTED(cudaPeekAtLastError)(void) {
  const cudaError_t routed = wb_route::pending;
  return routed != cudaSuccess ? routed : wb_route::real<cudaError_t (*)(void)>("cudaPeekAtLastError")();
}

// The loader's provider (run/nvrtc_routes.py), set once per library after it is loaded.
extern "C" __attribute__((visibility("default"))) void wb_nvrtc_set_provider(wb_route::Provider provider) {
  wb_route::state().provider.store(provider);
}

#endif  // __CUDA_ARCH__
#endif  // WB_NVRTC_ROUTED

// The torch-facing harness: the only code where torch meets the kernels.
//
// Each op has one file here (bias_gelu.cpp, ...) that defines its schemas, validates arguments and
// fills the op's torch-free parameter struct; this header gives them the shared pieces: the variant
// registry, argument checks whose messages name the argument and what was expected, the launch
// context (device guard, current stream, thread pool) and the launch-status check.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <memory>
#include <optional>
#include <string>

#ifdef WORKBENCH_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

#include "wb_variant.h"

namespace workbench {

// One loaded variant library (a build of one variant source).
struct Variant {
  std::string op, name, build_id, path;
  const WbVariantInfo* info;
  std::string qualified() const { return name + "@" + build_id; }
};

// The variant registered as `name` (its newest build) or `name@build_id` (that exact build).
// Throws, listing what is loaded, if there is none.
std::shared_ptr<const Variant> find_variant(const char* op, c10::string_view name);

// Argument checks. Each message says which op, which argument, what was expected and what came.
void check_defined(const char* op, const char* arg, const at::Tensor& t);
void check_same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref);
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref);
void check_same_shape(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref);
// The variant runs on t's device kind and supports t's dtype; returns the WbDtype to pass on.
int check_variant_accepts(const char* op, const Variant& v, const char* arg, const at::Tensor& t);

// Scratch memory from torch's allocator on t's device (the caching allocator on CUDA).
at::Tensor workspace(size_t bytes, const at::Tensor& like);

// Launch context for tensors on t's device. Construct it after the device guard.
WbLaunch launch_for(const at::Tensor& t);

// Turns a launcher's status into an exception naming the op, the variant and the step.
void check_status(const char* op, const Variant& v, const char* step, int status);

// Makes t's GPU the current device for the scope of a launch (CUDAGuard); nothing for CPU tensors.
class DeviceScope {
 public:
  explicit DeviceScope(const at::Tensor& t) {
#ifdef WORKBENCH_WITH_CUDA
    if (t.is_cuda()) guard_.emplace(t.device());
#else
    (void)t;
#endif
  }

 private:
#ifdef WORKBENCH_WITH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard_;
#endif
};

}  // namespace workbench

// Registers one function for both CPU and (where torch has CUDA) CUDA tensors: the function itself
// validates devices and routes to the variant, so one body serves both dispatch keys.
#ifdef WORKBENCH_WITH_CUDA
#define WB_IMPL_CPU_AND_CUDA(NAME, FN)                              \
  TORCH_LIBRARY_IMPL(workbench, CPU, m) { m.impl(NAME, FN); }       \
  TORCH_LIBRARY_IMPL(workbench, CUDA, m) { m.impl(NAME, FN); }
#else
#define WB_IMPL_CPU_AND_CUDA(NAME, FN) \
  TORCH_LIBRARY_IMPL(workbench, CPU, m) { m.impl(NAME, FN); }
#endif

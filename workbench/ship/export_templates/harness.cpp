// See harness.h. The call check and the run of a checked call are the workbench's (call_check.h,
// copied from bindings/harness/: check_call, run_call),
// which the Python fake implementation in __init__.py mirrors (_shapes.py), with the same words, so
// a bad call fails the same way eagerly and under torch.compile.
#include "harness.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <map>
#include <mutex>
#include <optional>

#ifdef WB_EXPORT_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace wb_export {
namespace {

using workbench::dtype_list;
using workbench::dtype_name;
using workbench::wb_dtype;

void run_range(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}
const WbHost kHost = {run_range};

#ifdef WB_EXPORT_WITH_CUDA
int sm_count(int device) {
  static std::mutex mutex;
  static std::map<int, int> known;  // one attribute query per device, not per call
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int n = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
  TORCH_CHECK(err == cudaSuccess, "cannot read the multiprocessor count of cuda:", device, ": ", cudaGetErrorString(err));
  return known[device] = n;
}
#endif

}  // namespace

Op::Op(const char* ns, const workbench::OpDecl& decl, const WbOpBinding* binding, std::vector<VariantEntry> variants)
    : decl_(decl), binding_(binding) {
  const std::string& op = decl_.fields.op;
  prefix_ = std::string(ns) + "::" + op + ": ";
  TORCH_CHECK(binding_ && binding_->abi_version == WB_BINDING_ABI_VERSION && binding_->run, prefix_,
              "the op's binding does not match wb_op.h");
  for (const auto& v : variants) {
    const WbVariantInfo* info = v.info();
    TORCH_CHECK(info && info->abi_version == WB_ABI_VERSION && info->launchers && op == info->op, prefix_,
                "variant '", v.name, "' does not match wb_variant.h or is not a variant of ", op);
    variants_.push_back({v.name, info});
  }
}

const Op::Entry& Op::pick(int step, const std::string& variant, const at::Tensor& x, const std::string& x_name) const {
  const int dtype = wb_dtype(x.scalar_type());
  const bool cuda = x.is_cuda();
  auto fits = [&](const Entry& e) {
    return (e.info->device == WB_DEVICE_CUDA) == cuda && (e.info->dtypes & (1u << dtype)) &&
           wb_launcher_for_step(e.info->launchers, step) != nullptr;
  };
  std::string listed;
  for (const auto& e : variants_)
    listed += (listed.empty() ? "" : ", ") + e.name + " (" + (e.info->device == WB_DEVICE_CUDA ? "cuda" : "cpu") +
              ": " + dtype_list(e.info->dtypes) + ")";
  const char* what = step == WB_STEP_FORWARD ? "forward" : "backward";
  if (variant.empty()) {
    for (const auto& e : variants_)
      if (fits(e)) return e;
    TORCH_CHECK(false, prefix_, "no exported variant runs a ", what, " on ", x.device().type() == c10::kCUDA ? "CUDA" : "CPU",
                " tensors of dtype ", dtype_name(x.scalar_type()), "; exported: ", listed);
  }
  const Entry* found = nullptr;
  for (const auto& e : variants_)
    if (e.name == variant) found = &e;
  TORCH_CHECK_VALUE(found, prefix_, "variant must be one of the exported variants (", listed, ") or \"\"; got '",
                    variant, "'");
  const bool wants_cuda = found->info->device == WB_DEVICE_CUDA;
  TORCH_CHECK(wants_cuda == cuda, prefix_, "variant '", found->name, "' runs on ", wants_cuda ? "CUDA" : "CPU",
              " tensors; ", x_name, " is on ", x.device());
  TORCH_CHECK_TYPE(found->info->dtypes & (1u << dtype), prefix_, "variant '", found->name, "' supports dtypes ",
                   dtype_list(found->info->dtypes), "; ", x_name, " is ", dtype_name(x.scalar_type()));
  TORCH_CHECK_NOT_IMPLEMENTED(wb_launcher_for_step(found->info->launchers, step) != nullptr, prefix_, "variant '",
                              found->name, "' has no ", what);
  return *found;
}

std::vector<at::Tensor> Op::run(int step, const std::vector<at::Tensor>& tensors, std::vector<WbAttr> attrs,
                                const std::string& variant) const {
  size_t first = 0;
  const std::vector<workbench::CallArg> args = workbench::call_args(decl_, step, tensors, &first);
  const at::Tensor& x = args[first].tensor;
  const workbench::ShapeBinder shapes = workbench::check_call(prefix_, decl_, args, first, attrs);
  const Entry& chosen = pick(step, variant, x, args[first].name);

  WbLaunch launch{};
  launch.host = &kHost;
#ifdef WB_EXPORT_WITH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard;
  if (x.is_cuda()) {
    guard.emplace(x.device());
    launch.device = x.get_device();
    launch.stream = c10::cuda::getCurrentCUDAStream(launch.device).stream();
    launch.num_sms = sm_count(launch.device);
  }
#endif
  return workbench::run_call(decl_, step, args, first, shapes, attrs, *binding_, *chosen.info, launch, prefix_,
                             chosen.name);
}

}  // namespace wb_export

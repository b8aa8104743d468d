// See harness.h. Checks run in the order of the Python fake implementation in __init__.py, with
// the same words, so a bad call fails the same way eagerly and under torch.compile.
#include "harness.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cmath>
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

const char* dtype_label(int d) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16"};
  return d >= 0 && d < 4 ? names[d] : "?";
}

// The WbDtype of a torch dtype (indices of dtype_label's names), or -1.
int wb_dtype_of(at::ScalarType s) {
  const at::ScalarType kernel_types[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  for (int d = 0; d < 4; ++d)
    if (kernel_types[d] == s) return d;
  return -1;
}

// torch's own spelling without the "torch." prefix, as the Python side prints dtypes.
std::string dtype_text(at::ScalarType s) {
  const int d = wb_dtype_of(s);
  if (d >= 0) return dtype_label(d);
  std::string name = c10::toString(s);
  static const std::map<std::string, std::string> torch_names = {
      {"Byte", "uint8"}, {"Char", "int8"},   {"Short", "int16"}, {"Int", "int32"},
      {"Long", "int64"}, {"Bool", "bool"},   {"ComplexFloat", "complex64"}, {"ComplexDouble", "complex128"}};
  const auto it = torch_names.find(name);
  return it == torch_names.end() ? name : it->second;
}

std::string dtypes_text(unsigned mask) {
  std::string out;
  for (int d = 0; d < 4; ++d)
    if (mask & (1u << d)) out += (out.empty() ? "" : ", ") + std::string(dtype_label(d));
  return out;
}

void run_range(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}
const WbHost kHost = {run_range};

WbTensor view(const at::Tensor& t, bool writable, bool with_data) {
  WbTensor v{};
  if (with_data) v.data = writable ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) v.sizes[d] = t.size(d);
  v.numel = t.numel();
  return v;
}

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

Op::Op(const char* ns, const char* declaration, const WbOpBinding* binding, std::vector<VariantEntry> variants)
    : decl_(workbench::OpDecl::parse(declaration)), binding_(binding) {
  prefix_ = std::string(ns) + "::" + decl_.op + ": ";
  TORCH_CHECK(binding_ && binding_->abi_version == WB_BINDING_ABI_VERSION && binding_->run, prefix_,
              "the op's binding does not match wb_op.h");
  for (const auto& v : variants) {
    const WbVariantInfo* info = v.info();
    TORCH_CHECK(info && info->abi_version == WB_ABI_VERSION && info->launchers && decl_.op == info->op, prefix_,
                "variant '", v.name, "' does not match wb_variant.h or is not a variant of ", decl_.op);
    variants_.push_back({v.name, info});
  }
}

const Op::Entry& Op::pick(int step, const std::string& variant, const at::Tensor& x, const std::string& x_name) const {
  const int dtype = wb_dtype_of(x.scalar_type());
  const bool cuda = x.is_cuda();
  auto fits = [&](const Entry& e) {
    return (e.info->device == WB_DEVICE_CUDA) == cuda && (e.info->dtypes & (1u << dtype)) &&
           wb_launcher_for_step(e.info->launchers, step) != nullptr;
  };
  std::string listed;
  for (const auto& e : variants_)
    listed += (listed.empty() ? "" : ", ") + e.name + " (" + (e.info->device == WB_DEVICE_CUDA ? "cuda" : "cpu") +
              ": " + dtypes_text(e.info->dtypes) + ")";
  const char* what = step == WB_STEP_FORWARD ? "forward" : "backward";
  if (variant.empty()) {
    for (const auto& e : variants_)
      if (fits(e)) return e;
    TORCH_CHECK(false, prefix_, "no exported variant runs a ", what, " on ", x.device().type() == c10::kCUDA ? "CUDA" : "CPU",
                " tensors of dtype ", dtype_text(x.scalar_type()), "; exported: ", listed);
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
                   dtypes_text(found->info->dtypes), "; ", x_name, " is ", dtype_text(x.scalar_type()));
  TORCH_CHECK_NOT_IMPLEMENTED(wb_launcher_for_step(found->info->launchers, step) != nullptr, prefix_, "variant '",
                              found->name, "' has no ", what);
  return *found;
}

std::vector<at::Tensor> Op::run(int step, const std::vector<at::Tensor>& tensors, std::vector<WbAttr> attrs,
                                const std::string& variant) const {
  const std::string& p = prefix_;
  // Schema order: forward, the inputs; backward, a gradient per output, then the inputs.
  std::vector<std::string> names;
  std::vector<const workbench::DimPattern*> dims;
  std::vector<bool> reads;
  if (step == WB_STEP_BACKWARD)
    for (const auto& o : decl_.outputs) {
      names.push_back("grad_" + o.name);
      dims.push_back(&o.dims);
      reads.push_back(true);
    }
  const size_t first = names.size();
  for (const auto& in : decl_.inputs) {
    names.push_back(in.name);
    dims.push_back(&in.dims);
    reads.push_back(step == WB_STEP_FORWARD || in.read_by_backward);
  }
  TORCH_CHECK(tensors.size() == names.size(), p, "expected ", names.size(), " tensors; got ", tensors.size());
  const at::Tensor& x = tensors[first];
  const std::string& x_name = names[first];

  for (size_t i = 0; i < tensors.size(); ++i)
    TORCH_CHECK_VALUE(tensors[i].defined(), p, names[i], " must be a tensor; got None");
  for (size_t i = 0; i < tensors.size(); ++i)
    TORCH_CHECK(tensors[i].device() == x.device(), p, names[i], " must be on the same device as ", x_name, " (",
                x.device(), "); got ", names[i], " on ", tensors[i].device());
  for (size_t i = 0; i < tensors.size(); ++i)
    TORCH_CHECK_TYPE(tensors[i].scalar_type() == x.scalar_type(), p, names[i], " must have the dtype of ", x_name,
                     " (", dtype_text(x.scalar_type()), "); got ", dtype_text(tensors[i].scalar_type()));
  TORCH_CHECK_TYPE(wb_dtype_of(x.scalar_type()) >= 0, p, x_name, " must be float32, float64, float16 or bfloat16; got ",
                   dtype_text(x.scalar_type()));
  workbench::ShapeBinder shapes;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const size_t i = (first + k) % tensors.size();  // the inputs bind the dims first
    TORCH_CHECK_VALUE(tensors[i].dim() <= WB_MAX_DIMS, p, names[i], " has ", tensors[i].dim(),
                      " dimensions; at most ", WB_MAX_DIMS, " are supported");
    const std::string err = shapes.bind(names[i], *dims[i], tensors[i].sizes().vec());
    TORCH_CHECK_VALUE(err.empty(), p, err);
  }
  TORCH_CHECK(attrs.size() == decl_.attrs.size(), p, "expected ", decl_.attrs.size(), " attributes");
  for (size_t i = 0; i < attrs.size(); ++i) {
    const workbench::AttrDecl& a = decl_.attrs[i];
    const bool is_float = a.kind == "float";
    const double v = is_float ? attrs[i].f : static_cast<double>(attrs[i].i);
    TORCH_CHECK_VALUE(!is_float || !a.finite || std::isfinite(v), p, a.name, " must be a finite number; got ", v);
    TORCH_CHECK_VALUE(!a.has_min || v >= a.min, p, a.name, " must be >= ", a.min, "; got ", v);
    TORCH_CHECK_VALUE(!a.has_max || v <= a.max, p, a.name, " must be <= ", a.max, "; got ", v);
  }
  const Entry& chosen = pick(step, variant, x, x_name);

  std::vector<at::Tensor> outs;
  if (step == WB_STEP_FORWARD)
    for (const auto& o : decl_.outputs) outs.push_back(at::empty(shapes.shape_of(o.dims), x.options()));
  else
    for (int i : decl_.differentiable) outs.push_back(at::empty(tensors[first + i].sizes(), x.options()));
  // An empty tensor that the step reads, or nothing to write: the kernels are not called; an
  // output that is not empty is then a sum over nothing.
  bool skip = true;
  for (const auto& o : outs) skip = skip && o.numel() == 0;
  for (size_t i = 0; i < tensors.size(); ++i) skip = skip || (reads[i] && tensors[i].numel() == 0);
  if (skip) {
    for (auto& o : outs) o.zero_();
    return outs;
  }

  WbCall call{};
  call.dtype = wb_dtype_of(x.scalar_type());
  call.n_inputs = static_cast<int>(tensors.size());
  call.n_outputs = static_cast<int>(outs.size());
  call.n_attrs = static_cast<int>(attrs.size());
  std::vector<at::Tensor> held;  // contiguous copies of strided inputs live until the launch returns
  for (size_t i = 0; i < tensors.size(); ++i) {
    held.push_back(reads[i] ? tensors[i].contiguous() : tensors[i]);
    call.inputs[i] = view(held.back(), false, reads[i]);  // a shape-only input carries no data pointer
  }
  for (size_t i = 0; i < outs.size(); ++i) call.outputs[i] = view(outs[i], true, true);
  for (size_t i = 0; i < attrs.size(); ++i) call.attrs[i] = attrs[i];

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
  const void* table = chosen.info->launchers;
  const size_t ws = binding_->workspace_bytes ? binding_->workspace_bytes(step, &call, table, &launch) : 0;
  at::Tensor workspace;
  if (ws) {
    workspace = at::empty({static_cast<int64_t>(ws)}, x.options().dtype(at::kByte));
    call.workspace = workspace.mutable_data_ptr();
  }
  const int status = binding_->run(step, &call, table, &launch);
  TORCH_CHECK(status == WB_OK, p, "variant '", chosen.name, "' ", step == WB_STEP_FORWARD ? "forward" : "backward",
              " failed: ", chosen.info->status_string(status), " (status ", status, ")");
  return outs;
}

}  // namespace wb_export

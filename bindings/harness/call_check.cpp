// See call_check.h.
#include "call_check.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace workbench {

std::vector<CallArg> call_args(const OpDecl& d, int step, const std::vector<at::Tensor>& tensors,
                               size_t* first_input) {
  const size_t expected = d.inputs.size() + (step == WB_STEP_BACKWARD ? d.outputs.size() : 0);
  TORCH_CHECK(tensors.size() == expected, d.op, ": expected ", expected, " tensors; got ", tensors.size());
  std::vector<CallArg> args;
  args.reserve(expected);
  size_t k = 0;
  if (step == WB_STEP_BACKWARD)
    for (const auto& o : d.outputs) args.push_back({"grad_" + o.name, tensors[k++], &o.dims, true});
  *first_input = args.size();
  for (const auto& in : d.inputs)
    args.push_back({in.name, tensors[k++], &in.dims, step == WB_STEP_FORWARD || in.read_by_backward});
  return args;
}

ShapeBinder check_call(const std::string& p, const OpDecl& d, const std::vector<CallArg>& args,
                       size_t first_input, const std::vector<WbAttr>& attrs) {
  const CallArg& ref = args[first_input];
  const at::Tensor& x = ref.tensor;
  for (const CallArg& a : args)
    TORCH_CHECK_VALUE(a.tensor.defined(), p, a.name, " must be a tensor; got None");
  for (const CallArg& a : args)
    TORCH_CHECK(a.tensor.device() == x.device(), p, a.name, " must be on the same device as ", ref.name, " (",
                x.device(), "); got ", a.name, " on ", a.tensor.device());
  for (const CallArg& a : args)
    TORCH_CHECK_TYPE(a.tensor.scalar_type() == x.scalar_type(), p, a.name, " must have the dtype of ", ref.name,
                     " (", dtype_name(x.scalar_type()), "); got ", dtype_name(a.tensor.scalar_type()));
  TORCH_CHECK_TYPE(wb_dtype(x.scalar_type()) >= 0, p, ref.name, " must be float32, float64, float16 or bfloat16; got ",
                   dtype_name(x.scalar_type()));
  ShapeBinder binder;
  for (size_t i = 0; i < args.size(); ++i) {
    const CallArg& a = args[(i + first_input) % args.size()];  // inputs first: they bind the names
    TORCH_CHECK_VALUE(a.tensor.dim() <= WB_MAX_DIMS, p, a.name, " has ", a.tensor.dim(),
                      " dimensions; at most ", WB_MAX_DIMS, " are supported");
    const std::string err = binder.bind(a.name, *a.dims, a.tensor.sizes().data(), a.tensor.dim());
    TORCH_CHECK_VALUE(err.empty(), p, err);
  }
  TORCH_CHECK(attrs.size() == d.attrs.size(), p, "expected ", d.attrs.size(), " attributes; got ", attrs.size());
  for (size_t i = 0; i < d.attrs.size(); ++i) {
    const AttrDecl& a = d.attrs[i];
    if (a.kind == "float") {
      const double v = attrs[i].f;
      TORCH_CHECK_VALUE(!a.finite || std::isfinite(v), p, a.name, " must be a finite number; got ", v);
      TORCH_CHECK_VALUE(!a.has_min || v >= a.min, p, a.name, " must be >= ", a.min, "; got ", v);
      TORCH_CHECK_VALUE(!a.has_max || v <= a.max, p, a.name, " must be <= ", a.max, "; got ", v);
    } else {
      const int64_t v = attrs[i].i;
      const double dv = static_cast<double>(v);
      TORCH_CHECK_VALUE(!a.has_min || dv >= a.min, p, a.name, " must be >= ", a.min, "; got ", v);
      TORCH_CHECK_VALUE(!a.has_max || dv <= a.max, p, a.name, " must be <= ", a.max, "; got ", v);
    }
  }
  return binder;
}

namespace {
WbTensor view_of(const at::Tensor& t, bool writable, bool with_data) {
  WbTensor v{};
  if (with_data) v.data = writable ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) v.sizes[d] = t.size(d);
  v.numel = t.numel();
  return v;
}
}  // namespace

std::vector<at::Tensor> run_call(const OpDecl& d, int step, const std::vector<CallArg>& args, size_t first_input,
                                 const ShapeBinder& binder, const std::vector<WbAttr>& attrs,
                                 const WbOpBinding& binding, const WbVariantInfo& variant, const WbLaunch& launch,
                                 const std::string& prefix, const std::string& label) {
  const at::Tensor& x = args[first_input].tensor;
  std::vector<at::Tensor> outs;
  if (step == WB_STEP_FORWARD) {
    for (const auto& o : d.outputs) outs.push_back(at::empty(binder.shape_of(o.dims), x.options()));
  } else {
    for (int i : d.differentiable) outs.push_back(at::empty(args[first_input + i].tensor.sizes(), x.options()));
  }
  bool skip = true;
  for (const auto& o : outs) skip = skip && o.numel() == 0;
  for (const CallArg& a : args) skip = skip || (a.read && a.tensor.numel() == 0);
  if (skip) {
    for (auto& o : outs) o.zero_();
    return outs;
  }

  WbCall call{};
  call.dtype = wb_dtype(x.scalar_type());
  call.n_inputs = static_cast<int>(args.size());
  call.n_outputs = static_cast<int>(outs.size());
  call.n_attrs = static_cast<int>(attrs.size());
  std::vector<at::Tensor> held;  // contiguous copies live until the run returns
  held.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    held.push_back(args[i].read ? args[i].tensor.contiguous() : args[i].tensor);
    call.inputs[i] = view_of(held.back(), false, args[i].read);
  }
  for (size_t i = 0; i < outs.size(); ++i) call.outputs[i] = view_of(outs[i], true, true);
  for (size_t i = 0; i < attrs.size(); ++i) call.attrs[i] = attrs[i];

  const size_t ws_bytes =
      binding.workspace_bytes ? binding.workspace_bytes(step, &call, variant.launchers, &launch) : 0;
  at::Tensor workspace;
  if (ws_bytes) {
    workspace = at::empty({static_cast<int64_t>(ws_bytes)}, x.options().dtype(at::kByte));
    call.workspace = workspace.mutable_data_ptr();
  }
  const int status = binding.run(step, &call, variant.launchers, &launch);
  TORCH_CHECK(status == WB_OK, prefix, "variant '", label, "' ", step == WB_STEP_FORWARD ? "forward" : "backward",
              " failed: ", variant.status_string(status), " (status ", status, ")");
  return outs;
}

std::string dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(s);
  }
}

const char* wb_dtype_name(int d) {
  switch (d) {
    case WB_FLOAT32: return "float32";
    case WB_FLOAT64: return "float64";
    case WB_FLOAT16: return "float16";
    case WB_BFLOAT16: return "bfloat16";
  }
  return "?";
}

int wb_dtype(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return WB_FLOAT32;
    case at::kDouble: return WB_FLOAT64;
    case at::kHalf: return WB_FLOAT16;
    case at::kBFloat16: return WB_BFLOAT16;
    default: return -1;
  }
}

std::string dtype_list(unsigned mask) {
  std::string out;
  for (int d = WB_FLOAT32; d <= WB_BFLOAT16; ++d)
    if (mask & (1u << d)) out += (out.empty() ? "" : ", ") + std::string(wb_dtype_name(d));
  return out;
}

}  // namespace workbench

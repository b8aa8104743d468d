// See call_check.h.
#include "call_check.h"

#include <c10/util/Exception.h>

#include <cmath>

namespace workbench {

std::vector<CallArg> call_args(const OpDecl& d, int step, const std::vector<at::Tensor>& tensors,
                               size_t* first_input) {
  const size_t expected = d.inputs.size() + (step == WB_STEP_BACKWARD ? d.outputs.size() : 0);
  TORCH_CHECK(tensors.size() == expected, d.op, ": expected ", expected, " tensors; got ", tensors.size());
  std::vector<CallArg> args;
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
    const std::string err = binder.bind(a.name, *a.dims, a.tensor.sizes().vec());
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

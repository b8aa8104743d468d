// See call_check.h: call_contract.h's contract on at::Tensors.
#include "call_check.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#ifdef WORKBENCH_WITH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#endif
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace workbench {
namespace {

// How the contract reads a torch call (call_contract.h's front end): c10's errors.
struct TorchFront {
  using Arg = CallArg;
  static bool given(const CallArg& a) { return a.tensor.defined(); }
  static bool same_device(const CallArg& a, const CallArg& b) { return a.tensor.device() == b.tensor.device(); }
  static std::string device_text(const CallArg& a) { return c10::str(a.tensor.device()); }
  static bool same_dtype(const CallArg& a, const CallArg& b) {
    return a.tensor.scalar_type() == b.tensor.scalar_type();
  }
  static std::string dtype_text(const CallArg& a) { return dtype_name(a.tensor.scalar_type()); }
  static int wb_dtype(const CallArg& a) { return workbench::wb_dtype(a.tensor.scalar_type()); }
  static int64_t dim(const CallArg& a) { return a.tensor.dim(); }
  static const int64_t* sizes(const CallArg& a) { return a.tensor.sizes().data(); }
  static int64_t numel(const CallArg& a) { return a.tensor.numel(); }
  [[noreturn]] static void fail(CallFault fault, const std::string& message) {
    if (fault == CallFault::Value) TORCH_CHECK_VALUE(false, message);
    if (fault == CallFault::Type) TORCH_CHECK_TYPE(false, message);
    TORCH_CHECK(false, message);
  }
};

WbTensor view_of(const at::Tensor& t, void* data) { return wb_tensor(data, t.dim(), t.sizes().data(), t.numel()); }

// An output on x's device, of its dtype, allocated as a native op allocates its outputs (the
// device's allocator directly), not through the dispatcher's at::empty: the call has been
// dispatched already, and a tiny call's allocation cost as much again through it. Where
// uninitialized memory is to be filled (deterministic mode: how wb.check poisons outputs), at::empty,
// which fills it.
at::Tensor new_output(const std::vector<int64_t>& shape, const at::Tensor& x) {
  const auto& context = at::globalContext();
  if (context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory())
    return at::empty(shape, x.options());
  if (x.is_cpu()) return at::detail::empty_cpu(shape, x.options());
#ifdef WORKBENCH_WITH_CUDA
  if (x.is_cuda()) return at::detail::empty_cuda(shape, x.options());
#endif
  return at::empty(shape, x.options());
}

}  // namespace

std::vector<CallArg> call_args(const OpDecl& d, int step, const std::vector<at::Tensor>& tensors,
                               size_t* first_input) {
  return schema_args<TorchFront>(d, step, tensors, first_input);
}

ShapeBinder check_call(const std::string& p, const OpDecl& d, const std::vector<CallArg>& args,
                       size_t first_input, const std::vector<WbAttr>& attrs) {
  return check_call_as<TorchFront>(p, d, args, first_input, attrs);
}

std::vector<at::Tensor> run_call(const OpDecl& d, int step, const std::vector<CallArg>& args, size_t first_input,
                                 const ShapeBinder& binder, const std::vector<WbAttr>& attrs,
                                 const WbOpBinding& binding, const WbVariantInfo& variant, const WbLaunch& launch,
                                 const std::string& prefix, const std::string& label) {
  const at::Tensor& x = args[first_input].tensor;
  const std::vector<std::vector<int64_t>> shapes = output_shapes<TorchFront>(d, step, args, first_input, binder);
  std::vector<at::Tensor> outs;
  outs.reserve(shapes.size());
  if (nothing_to_launch<TorchFront>(args, shapes)) {
    for (const auto& s : shapes) outs.push_back(at::zeros(s, x.options()));
    return outs;
  }
  for (const auto& s : shapes) outs.push_back(new_output(s, x));

  WbCall call = wb_call(wb_dtype(x.scalar_type()), args.size(), outs.size(), attrs);
  std::vector<at::Tensor> held;  // contiguous copies live until the run returns
  held.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    held.push_back(args[i].read ? args[i].tensor.contiguous() : args[i].tensor);
    call.inputs[i] = view_of(held.back(), args[i].read ? const_cast<void*>(held.back().const_data_ptr()) : nullptr);
  }
  for (size_t i = 0; i < outs.size(); ++i) call.outputs[i] = view_of(outs[i], outs[i].mutable_data_ptr());

  at::Tensor workspace;
  if (const size_t ws_bytes = workspace_bytes(binding, variant, step, call, launch)) {
    workspace = at::empty({static_cast<int64_t>(ws_bytes)}, x.options().dtype(at::kByte));
    call.workspace = workspace.mutable_data_ptr();
  }
  launch_call<TorchFront>(binding, variant, step, call, launch, prefix, label);
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

int wb_dtype(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return WB_FLOAT32;
    case at::kDouble: return WB_FLOAT64;
    case at::kHalf: return WB_FLOAT16;
    case at::kBFloat16: return WB_BFLOAT16;
    default: return -1;
  }
}

}  // namespace workbench

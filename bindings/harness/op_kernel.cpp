// The one kernel behind every torch.ops.workbench.<op> and <op>_backward: it checks a call against
// the op's declaration, allocates the outputs, and runs the variant through the op's binding.
//
// The call check (call_check.h: devices, dtypes, shapes, attributes) is the one the Python fake
// implementations mirror (workbench/model/shapes.py), same order, same words. Then the variant's own
// limits: its device, its dtypes, the op header it was built against, and whether it has this step.
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <map>
#include <mutex>

#include "harness.h"

namespace workbench {
namespace {

struct Step {
  std::shared_ptr<const OpDecl> decl;
  int step;
};

std::mutex steps_mutex;
std::map<std::string, Step> steps;                       // "workbench::bias_gelu_backward" -> its step
std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process

const char* step_name(int step) { return step == WB_STEP_FORWARD ? "forward" : "backward"; }

WbTensor view_of(const at::Tensor& t, bool writable) {
  WbTensor v{};
  v.data = writable ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) v.sizes[d] = t.size(d);
  v.numel = t.numel();
  return v;
}

// The attribute values as the binding takes them: float ones in .f, int and bool ones in .i.
std::vector<WbAttr> attr_values(const OpDecl& d, const std::vector<c10::IValue>& values) {
  std::vector<WbAttr> out(d.attrs.size());
  for (size_t i = 0; i < d.attrs.size(); ++i) {
    const std::string& kind = d.attrs[i].kind;
    if (kind == "float") out[i].f = values[i].toDouble();
    else out[i].i = kind == "bool" ? static_cast<int64_t>(values[i].toBool()) : values[i].toInt();
  }
  return out;
}

std::vector<at::Tensor> run_step(const OpDecl& d, int step, const std::vector<at::Tensor>& tensors,
                                 const std::vector<c10::IValue>& attrs, const std::string& variant) {
  const char* op = d.op.c_str();
  size_t first_input = 0;
  const std::vector<CallArg> args = call_args(d, step, tensors, &first_input);
  const CallArg& ref = args[first_input];
  const at::Tensor& x = ref.tensor;
  const std::vector<WbAttr> attr_vals = attr_values(d, attrs);
  const ShapeBinder binder = check_call("workbench::" + d.op + ": ", d, args, first_input, attr_vals);
  WbCall call{};
  for (size_t i = 0; i < attr_vals.size(); ++i) call.attrs[i] = attr_vals[i];

  const auto v = find_variant(d.op, variant);
  const bool wants_cuda = v->info->device == WB_DEVICE_CUDA;
  TORCH_CHECK(wants_cuda ? x.is_cuda() : x.is_cpu(), "workbench::", op, ": variant '", v->name, "' runs on ",
              wants_cuda ? "CUDA" : "CPU", " tensors; ", ref.name, " is on ", x.device(),
              wants_cuda ? " (move it to a GPU, or use a CPU variant such as 'cpu')" : " (use a CUDA variant, or .cpu() it)");
  const int dtype = wb_dtype(x.scalar_type());
  TORCH_CHECK_TYPE(v->info->dtypes & (1u << dtype), "workbench::", op, ": variant '", v->name, "' supports dtypes ",
                   dtype_list(v->info->dtypes), "; ", ref.name, " is ", dtype_name(x.scalar_type()));
  const auto b = find_binding(d.op);
  TORCH_CHECK(v->contract == b->contract, "workbench::", op, ": variant '", v->qualified(), "' was built against another ",
              op, ".h than the loaded binding of ", op, "; workbench.load('", op, "', '", v->name, "') rebuilds it");
  TORCH_CHECK_NOT_IMPLEMENTED(wb_launcher_for_step(v->info->launchers, step) != nullptr, op, "/", v->name, " has no ",
                              step_name(step), step == WB_STEP_BACKWARD ? "; gradients need a variant with one"
                                                                        : "; use a variant that has one");

  std::vector<at::Tensor> outs;
  if (step == WB_STEP_FORWARD) {
    for (const auto& o : d.outputs) outs.push_back(at::empty(binder.shape_of(o.dims), x.options()));
  } else {
    for (int i : d.differentiable) outs.push_back(at::empty(args[first_input + i].tensor.sizes(), x.options()));
  }
  // Any empty tensor the step reads: nothing to launch; outputs that are not empty are sums over
  // nothing (a column sum of zero rows, a product with an inner dimension of 0), so zeros.
  bool empty = false, all_outputs_empty = true;
  for (const CallArg& a : args) empty = empty || (a.read && a.tensor.numel() == 0);
  for (const auto& o : outs) all_outputs_empty = all_outputs_empty && o.numel() == 0;
  if (empty || all_outputs_empty) {
    for (auto& o : outs) o.zero_();
    return outs;
  }

  // Strided inputs become contiguous copies (correct, at the cost of a copy); views with a storage
  // offset stay as they are and each variant handles their alignment itself.
  std::vector<at::Tensor> keep;
  call.dtype = dtype;
  call.n_inputs = static_cast<int>(args.size());
  call.n_outputs = static_cast<int>(outs.size());
  call.n_attrs = static_cast<int>(d.attrs.size());
  for (size_t i = 0; i < args.size(); ++i) {
    keep.push_back(args[i].read ? args[i].tensor.contiguous() : args[i].tensor);
    call.inputs[i] = view_of(keep.back(), false);
    if (!args[i].read) call.inputs[i].data = nullptr;  // only the shape: a binding must not read it
  }
  for (size_t i = 0; i < outs.size(); ++i) call.outputs[i] = view_of(outs[i], true);

  DeviceScope scope(x);
  const WbLaunch launch = launch_for(x);
  const size_t ws_bytes = b->table->workspace_bytes
                              ? b->table->workspace_bytes(step, &call, v->info->launchers, &launch) : 0;
  at::Tensor ws;
  if (ws_bytes) {
    ws = at::empty({static_cast<int64_t>(ws_bytes)}, x.options().dtype(at::kByte));
    call.workspace = ws.mutable_data_ptr();
  }
  const int status = b->table->run(step, &call, v->info->launchers, &launch);
  TORCH_CHECK(status == WB_OK, "workbench::", op, ": variant '", v->qualified(), "' ", step_name(step), " failed: ",
              v->info->status_string(status), " (status ", status, ")");
  return outs;
}

// The boxed entry point the dispatcher calls for every declared op: the stack holds the schema's
// arguments (tensors, attributes, the variant's name) and receives the outputs.
void boxed_kernel(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  Step s;
  {
    std::lock_guard<std::mutex> lock(steps_mutex);
    s = steps.at(handle.schema().name());
  }
  const OpDecl& d = *s.decl;
  const size_t n_tensors = d.inputs.size() + (s.step == WB_STEP_BACKWARD ? d.outputs.size() : 0);
  const size_t n_args = n_tensors + d.attrs.size() + 1;
  auto args = torch::jit::last(*stack, n_args);
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < n_tensors; ++i) tensors.push_back(args[i].toTensor());
  const std::vector<c10::IValue> attrs(args.begin() + n_tensors, args.begin() + n_tensors + d.attrs.size());
  const std::string variant = args[n_args - 1].toStringRef();
  auto outs = run_step(d, s.step, tensors, attrs, variant);
  torch::jit::drop(*stack, n_args);
  for (auto& t : outs) torch::jit::push(*stack, std::move(t));
}

}  // namespace

void register_op_kernels(const OpDecl& decl) {
  auto shared = find_decl(decl.op);
  std::lock_guard<std::mutex> lock(steps_mutex);
  auto schemas = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "workbench", std::nullopt, __FILE__, __LINE__);
  schemas->def(decl.forward_schema.c_str());
  steps["workbench::" + decl.op] = {shared, WB_STEP_FORWARD};
  if (!decl.backward_schema.empty()) {
    schemas->def(decl.backward_schema.c_str());
    steps["workbench::" + decl.op + "_backward"] = {shared, WB_STEP_BACKWARD};
  }
  libraries.push_back(std::move(schemas));
  std::vector<c10::DispatchKey> keys = {c10::DispatchKey::CPU};
#ifdef WORKBENCH_WITH_CUDA
  keys.push_back(c10::DispatchKey::CUDA);
#endif
  for (auto key : keys) {
    auto impls = std::make_unique<torch::Library>(torch::Library::IMPL, "workbench", key, __FILE__, __LINE__);
    impls->impl(decl.op.c_str(), torch::CppFunction::makeFromBoxedFunction<&boxed_kernel>());
    if (!decl.backward_schema.empty())
      impls->impl((decl.op + "_backward").c_str(), torch::CppFunction::makeFromBoxedFunction<&boxed_kernel>());
    libraries.push_back(std::move(impls));
  }
}

}  // namespace workbench

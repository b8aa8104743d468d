// The one kernel behind every torch.ops.workbench.<op> and <op>_backward (at the CPU and CUDA keys;
// their Autograd key is op_autograd.cpp's): it checks a call against the op's declaration
// (call_check.h), then against the variant's own limits (its device, its dtypes, the op header it
// was built against, whether it has this step), allocates the outputs, and runs the variant.
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <mutex>

#include "harness.h"

namespace workbench {
namespace {

std::mutex libraries_mutex;
std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process

const char* step_name(int step) { return step == WB_STEP_FORWARD ? "forward" : "backward"; }

// The attribute values as the binding takes them: float ones in .f, int and bool ones in .i.
std::vector<WbAttr> attr_values(const OpDecl& d, c10::ArrayRef<c10::IValue> values) {
  std::vector<WbAttr> out(d.attrs.size());
  for (size_t i = 0; i < d.attrs.size(); ++i) {
    const std::string& kind = d.attrs[i].kind;
    if (kind == "float") out[i].f = values[i].toDouble();
    else out[i].i = kind == "bool" ? static_cast<int64_t>(values[i].toBool()) : values[i].toInt();
  }
  return out;
}

// What a variant's name resolves to: the variant and the op's binding (found once, see StepKernel).
struct Resolved {
  std::shared_ptr<const Variant> variant;
  std::shared_ptr<const Binding> binding;
};

// `vouched`: a backward call its node vouches for (harness.h, vouched_backward_call): the call check is
// skipped (a backward's outputs take their inputs' shapes, so run_call needs no binder from it).
template <typename Resolve>
std::vector<at::Tensor> run_step(const OpDecl& d, int step, const std::string& prefix,
                                 const std::vector<at::Tensor>& tensors, c10::ArrayRef<c10::IValue> attrs,
                                 bool vouched, Resolve&& resolve) {
  const char* op = d.fields.op.c_str();
  size_t first_input = 0;
  const std::vector<CallArg> args = call_args(d, step, tensors, &first_input);
  const CallArg& ref = args[first_input];
  const at::Tensor& x = ref.tensor;
  const std::vector<WbAttr> attr_vals = attr_values(d, attrs);
  const ShapeBinder binder = vouched ? ShapeBinder{} : check_call(prefix, d, args, first_input, attr_vals);

  const Resolved found = resolve();
  const auto& v = found.variant;
  const bool wants_cuda = v->info->device == WB_DEVICE_CUDA;
  TORCH_CHECK(wants_cuda ? x.is_cuda() : x.is_cpu(), "workbench::", op, ": variant '", v->name, "' runs on ",
              wants_cuda ? "CUDA" : "CPU", " tensors; ", ref.name, " is on ", x.device(),
              wants_cuda ? " (move it to a GPU, or use a CPU variant such as 'cpu')" : " (use a CUDA variant, or .cpu() it)");
  const int dtype = wb_dtype(x.scalar_type());
  TORCH_CHECK_TYPE(v->info->dtypes & (1u << dtype), "workbench::", op, ": variant '", v->name, "' supports dtypes ",
                   dtype_list(v->info->dtypes), "; ", ref.name, " is ", dtype_name(x.scalar_type()));
  const auto& b = found.binding;
  TORCH_CHECK(v->contract == b->contract, "workbench::", op, ": variant '", v->qualified(), "' was built against another ",
              op, ".h than the loaded binding of ", op, "; workbench.load('", op, "', '", v->name, "') rebuilds it");
  TORCH_CHECK_NOT_IMPLEMENTED(wb_launcher_for_step(v->info->launchers, step) != nullptr, op, "/", v->name, " has no ",
                              step_name(step), step == WB_STEP_BACKWARD ? "; gradients need a variant with one"
                                                                        : "; use a variant that has one");

  c10::OptionalDeviceGuard guard;  // x's GPU is current for the launch; nothing for a CPU tensor
  if (x.is_cuda()) guard.reset_device(x.device());
  return run_call(d, step, args, first_input, binder, attr_vals, *b->table, *v->info, launch_for(x), prefix,
                  v->qualified());
}

// The dispatcher's CPU and CUDA kernel of one step of one op: it knows its declaration and message
// prefix from its registration, and resolves a variant's name once (while no library is registered
// since), not per call.
struct StepKernel : c10::OperatorKernel {
  StepKernel(std::shared_ptr<const OpDecl> decl, int step)
      : decl(std::move(decl)), step(step), prefix("workbench::" + this->decl->fields.op + ": "),
        n_tensors(this->decl->inputs.size() + (step == WB_STEP_BACKWARD ? this->decl->outputs.size() : 0)) {}

  // The stack holds the schema's arguments (tensors, attributes, the variant's name) and receives
  // the outputs.
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const OpDecl& d = *decl;
    const size_t n_args = n_tensors + d.attrs.size() + 1;
    auto args = torch::jit::last(*stack, n_args);
    std::vector<at::Tensor> tensors;
    tensors.reserve(n_tensors);
    for (size_t i = 0; i < n_tensors; ++i) tensors.push_back(args[i].toTensor());
    const bool vouched = step == WB_STEP_BACKWARD && vouched_backward_call(op.schema(), tensors);
    const std::string& variant = args[n_args - 1].toStringRef();
    auto outs = run_step(d, step, prefix, tensors, args.slice(n_tensors, d.attrs.size()), vouched,
                         [&] { return resolve(variant); });
    torch::jit::drop(*stack, n_args);
    for (auto& t : outs) torch::jit::push(*stack, std::move(t));
  }

  Resolved resolve(const std::string& name) {
    const uint64_t generation = registry_generation();
    std::lock_guard<std::mutex> lock(mutex);
    if (generation != cached_generation || name != cached_name) {
      cached = {find_variant(decl->fields.op, name), nullptr};
      cached_name = name;
      cached_generation = generation;
    }
    // The binding after the variant, as the checks read: a variant that is not loaded is named first.
    if (!cached.binding) cached.binding = find_binding(decl->fields.op);
    return cached;
  }

  const std::shared_ptr<const OpDecl> decl;
  const int step;
  const std::string prefix;  // "workbench::<op>: ", the start of the call check's messages
  const size_t n_tensors;
  std::mutex mutex;
  std::string cached_name;
  uint64_t cached_generation = 0;
  Resolved cached;
};

}  // namespace

void register_op_kernels(const OpDecl& decl) {
  auto shared = find_decl(decl.fields.op);
  const bool differentiable = !decl.fields.backward_schema.empty();
  std::lock_guard<std::mutex> lock(libraries_mutex);
  auto schemas = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "workbench", std::nullopt, __FILE__, __LINE__);
  schemas->def(decl.fields.forward_schema.c_str());
  if (differentiable) {
    schemas->def(decl.fields.backward_schema.c_str());
    schemas->def(double_backward_schema(decl).c_str());
  }
  libraries.push_back(std::move(schemas));
  std::vector<c10::DispatchKey> keys = {c10::DispatchKey::CPU};
#ifdef WORKBENCH_WITH_CUDA
  keys.push_back(c10::DispatchKey::CUDA);
#endif
  for (auto key : keys) {
    auto impls = std::make_unique<torch::Library>(torch::Library::IMPL, "workbench", key, __FILE__, __LINE__);
    impls->impl(decl.fields.op.c_str(),
                torch::CppFunction::makeFromBoxedFunctor(std::make_unique<StepKernel>(shared, WB_STEP_FORWARD)));
    if (differentiable)
      impls->impl((decl.fields.op + "_backward").c_str(),
                  torch::CppFunction::makeFromBoxedFunctor(std::make_unique<StepKernel>(shared, WB_STEP_BACKWARD)));
    libraries.push_back(std::move(impls));
  }
  auto autograd = std::make_unique<torch::Library>(torch::Library::IMPL, "workbench", c10::DispatchKey::Autograd,
                                                   __FILE__, __LINE__);
  register_autograd_kernels(decl, *autograd);
  libraries.push_back(std::move(autograd));
}

}  // namespace workbench

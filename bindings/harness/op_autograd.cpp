// Autograd for every declared op, in C++ at the dispatcher's Autograd key: one boxed kernel for
// <op> and one for <op>_backward, so that no Python runs per call.
//
// With no input requiring grad (or grad mode off) the kernel only redispatches below autograd.
// Otherwise it records one StepNode for the call:
//   <op>:           saves the inputs; its apply calls <op>_backward(grads, inputs, attrs, variant)
//                   through the dispatcher (the same variant's backward; torch.compile traces it)
//                   and vouches for that call (harness.h, vouched_backward_call);
//   <op>_backward:  saves the gradients and inputs; its apply calls
//                   <op>_backward_backward(upstream, saved, attrs, variant), which the Python side
//                   implements from the spec (workbench/run/torchops.py).
// An output nobody used gets a zero gradient of its shape before <op>_backward sees it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>

#include "harness.h"

// The namespace of the ops the nodes call (<op>_backward, <op>_backward_backward): the harness's; an
// exported package's op.cpp defines its own before it includes this file.
#ifndef WB_OPS_NAMESPACE
#define WB_OPS_NAMESPACE "workbench"
#endif

namespace workbench {
namespace {

// The call a node vouches for (harness.h, vouched_backward_call), on the thread that runs the node,
// from just before its dispatcher call to just after it. (An exported package compiles this file
// with a harness of its own, which checks every call and never asks.)
struct VouchedCall {
  const c10::FunctionSchema* op = nullptr;
  const c10::TensorImpl* tensors[2 * WB_MAX_ARGS] = {};
  size_t n = 0;
};
thread_local VouchedCall vouched_backward;

}  // namespace

bool vouched_backward_call(const c10::FunctionSchema& op, const std::vector<at::Tensor>& tensors) {
  const VouchedCall& v = vouched_backward;
  if (v.op != &op || v.n != tensors.size()) return false;
  for (size_t i = 0; i < v.n; ++i)
    if (tensors[i].unsafeGetTensorImpl() != v.tensors[i]) return false;
  return true;
}

namespace {

using torch::autograd::variable_list;

// How torch holds a Node: std::shared_ptr up to torch 2.11 (the GPU machine's), c10::intrusive_ptr
// later (2.14 here); the harness builds against both, so the handle's kind is read off Edge.
using NodeHandle = decltype(torch::autograd::Edge{}.function);
constexpr bool kSharedNodes = std::is_same_v<NodeHandle, std::shared_ptr<torch::autograd::Node>>;

template <class T, class... Args>
auto make_node(Args&&... args) {
  if constexpr (kSharedNodes) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

// What every node of one step shares: the op its apply calls and how (set at registration).
struct StepInfo {
  c10::OperatorHandle next;          // <op>_backward, or <op>_backward_backward
  std::string node_name;             // "WorkbenchBiasGeluBackward"
  bool list_args;                    // next takes (Tensor?[] upstream, Tensor[] saved, ...)
  std::vector<int> result_of_edge;   // per input edge: the index of its gradient in what next returns, or -1
  size_t n_tensors, n_tail;          // the step's tensors, then its attributes and the variant's name
};

// One recorded call: its saved tensors and what follows them in the schema (attributes, the
// variant's name).
struct StepNode : torch::autograd::Node {
  explicit StepNode(std::shared_ptr<const StepInfo> info) : info_(std::move(info)) {}

  std::string name() const override { return info_->node_name; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : saved_) s.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Unvouch unvouch;  // whatever happens below, a vouch ends with this call
    torch::jit::Stack stack;
    stack.reserve(grads.size() + saved_.size() + tail_.size());
    if (info_->list_args) {  // <op>_backward_backward(Tensor?[] upstream, Tensor[] saved, ...)
      c10::List<std::optional<at::Tensor>> upstream;
      for (auto& g : grads) upstream.push_back(g.defined() ? std::optional<at::Tensor>(g) : std::nullopt);
      c10::List<at::Tensor> saved;
      for (const auto& s : saved_) saved.push_back(s.unpack());
      stack.emplace_back(std::move(upstream));
      stack.emplace_back(std::move(saved));
    } else {  // <op>_backward(grad_<output>..., <input>..., ...)
      for (size_t i = 0; i < grads.size(); ++i)
        stack.emplace_back(grads[i].defined() ? grads[i] : input_metadata(i).zeros_like());
      for (const auto& s : saved_) stack.emplace_back(s.unpack());
      vouch(stack, grads.size());
    }
    for (const auto& v : tail_) stack.push_back(v);
    // <op>_backward with nothing to record goes straight to the harness's step kernel. Under
    // create_graph the next op's Autograd kernel records its node; <op>_backward_backward always
    // goes through it: its kernel may be Python that runs autograd through the eager math.
    std::optional<at::AutoDispatchBelowAutograd> below;
    if (!info_->list_args && !at::GradMode::is_enabled()) below.emplace();
    info_->next.callBoxed(&stack);
    c10::SmallVector<at::Tensor, 2 * WB_MAX_ARGS> results;
    for (auto& v : stack) {
      if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) results.push_back(t);
      } else {
        results.push_back(std::move(v).toTensor());
      }
    }
    variable_list out(num_outputs());
    for (size_t e = 0; e < out.size(); ++e) {
      const int r = info_->result_of_edge[e];
      if (r < 0 || !should_compute_output(e)) continue;
      TORCH_INTERNAL_ASSERT(static_cast<size_t>(r) < results.size(), name(), ": its op returned ", results.size(),
                            " gradients");
      out[e] = std::move(results[r]);
    }
    return out;
  }

  std::vector<torch::autograd::SavedVariable> saved_;
  std::vector<c10::IValue> tail_;

 private:
  struct Unvouch {
    ~Unvouch() { vouched_backward = VouchedCall{}; }
  };

  // Vouches for the call on the stack's tensors (its first n_grads gradients, then the saved
  // inputs: the forward checked those) where each gradient is of its output's recorded shape and
  // of the first input's dtype and device; a gradient that is not (a node called from Python
  // with anything) leaves the call to the full check.
  void vouch(const torch::jit::Stack& stack, size_t n_grads) {
    const size_t n = stack.size();
    if (n > 2 * WB_MAX_ARGS || n_grads >= n) return;
    const at::Tensor& x = stack[n_grads].toTensor();
    for (size_t i = 0; i < n_grads; ++i) {
      const at::Tensor& g = stack[i].toTensor();
      if (g.scalar_type() != x.scalar_type() || g.device() != x.device() || !input_metadata(i).is_same_shape(g))
        return;
    }
    VouchedCall v;
    v.op = &info_->next.schema();
    for (size_t i = 0; i < n; ++i) v.tensors[i] = stack[i].toTensor().unsafeGetTensorImpl();
    v.n = n;
    vouched_backward = v;
  }

  std::mutex mutex_;
  std::shared_ptr<const StepInfo> info_;
};

// The Autograd-key kernel of one step (see the top of this file).
struct AutogradKernel : c10::OperatorKernel {
  explicit AutogradKernel(StepInfo info) : info(std::make_shared<const StepInfo>(std::move(info))) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    const size_t n_tensors = info->n_tensors;
    auto args = torch::jit::last(*stack, n_tensors + info->n_tail);
    bool record = false;
    if (at::GradMode::is_enabled())
      for (size_t i = 0; i < n_tensors && !record; ++i) {
        const c10::IValue& a = args[i];
        record = a.isTensor() && a.toTensor().requires_grad();
      }
    if (!record) {
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      return;
    }
    c10::SmallVector<at::Tensor, 2 * WB_MAX_ARGS> tensors;  // no allocation for the list itself
    for (size_t i = 0; i < n_tensors; ++i) tensors.push_back(args[i].toTensor());
    auto node = make_node<StepNode>(info);
    node->set_next_edges(torch::autograd::collect_next_edges(at::ArrayRef<at::Tensor>(tensors)));
    node->saved_.reserve(n_tensors);
    for (const auto& t : tensors) node->saved_.emplace_back(t, false);
    node->tail_.assign(args.begin() + n_tensors, args.end());
    {
      at::AutoDispatchBelowAutograd below;
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
    }
    const size_t n_returns = op.schema().returns().size();
    for (auto& v : torch::jit::last(*stack, n_returns)) torch::autograd::set_history(v.toTensor(), node);
  }

  const std::shared_ptr<const StepInfo> info;
};

std::string camel(const std::string& op) {  // bias_gelu -> BiasGelu
  std::string out;
  bool up = true;
  for (char ch : op) {
    if (ch == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    up = false;
  }
  return out;
}

c10::OperatorHandle handle_of(const std::string& name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow((WB_OPS_NAMESPACE "::" + name).c_str(), "");
}

}  // namespace

std::string double_backward_schema(const OpDecl& d) {
  std::string attrs;
  for (const auto& a : d.attrs) attrs += a.kind + " " + a.name + ", ";
  return d.fields.op + "_backward_backward(Tensor?[] upstream, Tensor[] saved, " + attrs +
         "str variant) -> Tensor[]";
}

void register_autograd_kernels(const OpDecl& d, torch::Library& impls) {
  const std::string& op = d.fields.op;
  if (d.fields.backward_schema.empty()) return;  // nothing differentiable: the dispatcher's default applies
  const size_t n_in = d.inputs.size(), n_out = d.outputs.size(), n_tail = d.attrs.size() + 1;
  // <op>: an edge per input; the differentiable ones' gradients come back from <op>_backward in order.
  std::vector<int> forward_edges(n_in, -1);
  for (size_t k = 0; k < d.differentiable.size(); ++k) forward_edges[d.differentiable[k]] = static_cast<int>(k);
  // <op>_backward: an edge per gradient and per input, each answered by <op>_backward_backward.
  std::vector<int> backward_edges(n_out + n_in);
  for (size_t e = 0; e < backward_edges.size(); ++e) backward_edges[e] = static_cast<int>(e);
  const std::string name = "Workbench" + camel(op);
  impls.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(StepInfo{
                               handle_of(op + "_backward"), name + "Backward", false, forward_edges, n_in, n_tail})));
  impls.impl((op + "_backward").c_str(),
             torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(
                 StepInfo{handle_of(op + "_backward_backward"), name + "BackwardBackward", true, backward_edges,
                          n_out + n_in, n_tail})));
}

}  // namespace workbench

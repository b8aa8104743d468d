// The call contract of every front end, torch-free: the tensors in schema order, the call check
// (each tensor given, on the first input's device, of its dtype, that dtype one the kernels take,
// at most WB_MAX_DIMS dims, shapes fitting the dims patterns, then the attributes' bounds), the
// outputs' shapes, the empty-tensor guard, and the run with its status checked. One copy, one order,
// the same words for the torch harness (call_check.cpp), an exported package's harness and the
// NumPy module (bindings/ndarray/ndarray_module.cpp); the Python twin of the check is
// workbench/model/shapes.py's check_call, and a test holds the words equal.
//
// A front end F tells the contract how to read its arguments. F::Arg is an aggregate
// {std::string name; <the front end's tensor> item; const DimPattern* dims; bool read;} (read:
// the step reads the data, else only its shape counts), and F has these static functions:
//   bool given(const Arg&);                                   (not None)
//   bool same_device(const Arg&, const Arg&);  std::string device_text(const Arg&);
//   bool same_dtype(const Arg&, const Arg&);   std::string dtype_text(const Arg&);
//   int wb_dtype(const Arg&);                                 (the WbDtype, or -1)
//   int64_t dim(const Arg&);  const int64_t* sizes(const Arg&);  int64_t numel(const Arg&);
//   [[noreturn]] void fail(CallFault, const std::string& message);
// Messages are built only on the way out: a call that passes builds no string.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "op_decl.h"
#include "wb_op.h"
#include "wb_variant.h"

namespace workbench {

// What a failed check is; each front end raises its own type for it (torch: c10::ValueError,
// c10::TypeError, c10::Error; NumPy: ValueError, TypeError, RuntimeError).
enum class CallFault { Value, Type, Runtime };

// A message from its parts, written as c10::str writes them (operator<<), so the words and the
// numbers read the same from every front end.
template <class... Parts>
std::string call_words(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

inline const char* wb_dtype_name(int wb_dtype) {  // "float32" for WB_FLOAT32
  switch (wb_dtype) {
    case WB_FLOAT32: return "float32";
    case WB_FLOAT64: return "float64";
    case WB_FLOAT16: return "float16";
    case WB_BFLOAT16: return "bfloat16";
  }
  return "?";
}

inline std::string dtype_list(unsigned mask) {  // "float32, bfloat16" for a variant's dtype mask
  std::string out;
  for (int d = WB_FLOAT32; d <= WB_BFLOAT16; ++d)
    if (mask & (1u << d)) out += (out.empty() ? "" : ", ") + std::string(wb_dtype_name(d));
  return out;
}

// The call's tensors in schema order: forward, the inputs; backward, a gradient per output
// ("grad_y"), then the inputs. *first_input: the index of the op's first input, the reference for
// device and dtype.
template <class F, class Item>
std::vector<typename F::Arg> schema_args(const OpDecl& d, int step, const std::vector<Item>& items,
                                         size_t* first_input) {
  const size_t expected = d.inputs.size() + (step == WB_STEP_BACKWARD ? d.outputs.size() : 0);
  if (items.size() != expected)
    F::fail(CallFault::Runtime,
            call_words(d.fields.op, ": expected ", expected, " tensors; got ", items.size()));
  std::vector<typename F::Arg> args;
  args.reserve(expected);
  size_t k = 0;
  if (step == WB_STEP_BACKWARD)
    for (const auto& o : d.outputs) args.push_back({"grad_" + o.name, items[k++], &o.dims, true});
  *first_input = args.size();
  for (const auto& in : d.inputs)
    args.push_back({in.name, items[k++], &in.dims, step == WB_STEP_FORWARD || in.read_by_backward});
  return args;
}

// Checks a call (see the top); `p` starts every message ("workbench::bias_gelu: "); attrs in
// declaration order (float ones in .f, int and bool ones in .i). Returns the binder, which gives
// the outputs' shapes.
template <class F>
ShapeBinder check_call_as(const std::string& p, const OpDecl& d, const std::vector<typename F::Arg>& args,
                          size_t first_input, const std::vector<WbAttr>& attrs) {
  const auto& ref = args[first_input];
  for (const auto& a : args)
    if (!F::given(a)) F::fail(CallFault::Value, call_words(p, a.name, " must be a tensor; got None"));
  for (const auto& a : args)
    if (!F::same_device(a, ref))
      F::fail(CallFault::Runtime, call_words(p, a.name, " must be on the same device as ", ref.name, " (",
                                             F::device_text(ref), "); got ", a.name, " on ", F::device_text(a)));
  for (const auto& a : args)
    if (!F::same_dtype(a, ref))
      F::fail(CallFault::Type, call_words(p, a.name, " must have the dtype of ", ref.name, " (", F::dtype_text(ref),
                                          "); got ", F::dtype_text(a)));
  if (F::wb_dtype(ref) < 0)
    F::fail(CallFault::Type, call_words(p, ref.name, " must be float32, float64, float16 or bfloat16; got ",
                                        F::dtype_text(ref)));
  ShapeBinder binder;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[(i + first_input) % args.size()];  // inputs first: they bind the names
    const int64_t ndim = F::dim(a);
    if (ndim > WB_MAX_DIMS)
      F::fail(CallFault::Value, call_words(p, a.name, " has ", ndim, " dimensions; at most ", WB_MAX_DIMS,
                                           " are supported"));
    const std::string err = binder.bind(a.name, *a.dims, F::sizes(a), static_cast<size_t>(ndim));
    if (!err.empty()) F::fail(CallFault::Value, p + err);
  }
  if (attrs.size() != d.attrs.size())
    F::fail(CallFault::Runtime, call_words(p, "expected ", d.attrs.size(), " attributes; got ", attrs.size()));
  for (size_t i = 0; i < d.attrs.size(); ++i) {
    const AttrDecl& a = d.attrs[i];
    if (a.kind == "float") {
      const double v = attrs[i].f;
      if (a.finite && !std::isfinite(v))
        F::fail(CallFault::Value, call_words(p, a.name, " must be a finite number; got ", v));
      if (a.has_min && !(v >= a.min))
        F::fail(CallFault::Value, call_words(p, a.name, " must be >= ", a.min, "; got ", v));
      if (a.has_max && !(v <= a.max))
        F::fail(CallFault::Value, call_words(p, a.name, " must be <= ", a.max, "; got ", v));
    } else {
      const int64_t v = attrs[i].i;
      const double dv = static_cast<double>(v);
      if (a.has_min && !(dv >= a.min))
        F::fail(CallFault::Value, call_words(p, a.name, " must be >= ", a.min, "; got ", v));
      if (a.has_max && !(dv <= a.max))
        F::fail(CallFault::Value, call_words(p, a.name, " must be <= ", a.max, "; got ", v));
    }
  }
  return binder;
}

// The shapes of a checked call's outputs: forward, the declared outputs' (bound by the check);
// backward, a gradient per differentiable input, of that input's shape.
template <class F>
std::vector<std::vector<int64_t>> output_shapes(const OpDecl& d, int step, const std::vector<typename F::Arg>& args,
                                                size_t first_input, const ShapeBinder& binder) {
  std::vector<std::vector<int64_t>> shapes;
  if (step == WB_STEP_FORWARD) {
    shapes.reserve(d.outputs.size());
    for (const auto& o : d.outputs) shapes.push_back(binder.shape_of(o.dims));
  } else {
    shapes.reserve(d.differentiable.size());
    for (int i : d.differentiable) {
      const auto& a = args[first_input + i];
      shapes.emplace_back(F::sizes(a), F::sizes(a) + F::dim(a));
    }
  }
  return shapes;
}

// The empty-tensor guard: nothing is launched where a tensor the step reads is empty, or every
// output is; the front end then fills the outputs with zeros (an output that is not empty is a
// sum over nothing).
template <class F>
bool nothing_to_launch(const std::vector<typename F::Arg>& args, const std::vector<std::vector<int64_t>>& out_shapes) {
  bool every_output_empty = true;
  for (const auto& shape : out_shapes) {
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    every_output_empty = every_output_empty && numel == 0;
  }
  if (every_output_empty) return true;
  for (const auto& a : args)
    if (a.read && F::numel(a) == 0) return true;
  return false;
}

// A tensor as a variant sees it: `data` (nullptr where the step does not read it), its sizes.
inline WbTensor wb_tensor(void* data, int64_t ndim, const int64_t* sizes, int64_t numel) {
  WbTensor t{};
  t.data = data;
  t.ndim = static_cast<int>(ndim);
  for (int d = 0; d < t.ndim; ++d) t.sizes[d] = sizes[d];
  t.numel = numel;
  return t;
}

// The WbCall of a checked call, its attributes in; the front end adds its tensors' views.
inline WbCall wb_call(int wb_dtype, size_t n_inputs, size_t n_outputs, const std::vector<WbAttr>& attrs) {
  WbCall call{};
  call.dtype = wb_dtype;
  call.n_inputs = static_cast<int>(n_inputs);
  call.n_outputs = static_cast<int>(n_outputs);
  call.n_attrs = static_cast<int>(attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) call.attrs[i] = attrs[i];
  return call;
}

// The scratch bytes the binding asks for this call (0: none); the front end allocates them.
inline size_t workspace_bytes(const WbOpBinding& binding, const WbVariantInfo& variant, int step, const WbCall& call,
                              const WbLaunch& launch) {
  return binding.workspace_bytes ? binding.workspace_bytes(step, &call, variant.launchers, &launch) : 0;
}

// One run of the call through the binding (workspace in place). A failure fails with
// "<prefix>variant '<label>' <step> failed: <the variant's words> (status N)".
template <class F>
void launch_call(const WbOpBinding& binding, const WbVariantInfo& variant, int step, const WbCall& call,
                 const WbLaunch& launch, const std::string& prefix, const std::string& label) {
  const int status = binding.run(step, &call, variant.launchers, &launch);
  if (status != WB_OK)
    F::fail(CallFault::Runtime, call_words(prefix, "variant '", label, "' ",
                                           step == WB_STEP_FORWARD ? "forward" : "backward", " failed: ",
                                           variant.status_string(status), " (status ", status, ")"));
}

}  // namespace workbench

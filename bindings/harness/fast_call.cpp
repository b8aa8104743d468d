// The Kernel handle's call from Python (workbench/run/kernel.py), in C: a plain call of a loaded
// build, its tensors alone with every attribute at its default, goes from Python to the
// dispatcher with no Python frame of torch's and no schema parsing. The attributes' values and the
// variant's name are converted once, when the handle is made; a call only unpacks its tensors,
// calls the op (through the dispatcher: the Autograd key's kernel, modes at the Python key,
// profiling all apply as they do through torch.ops) and wraps what it returns.
//
// What it does not serve it hands back (it returns NotImplemented, and the handle calls
// torch.ops.workbench.<op> instead, which serves everything): a count of arguments other than the
// op's inputs, anything but a plain torch.Tensor or nn.Parameter (a subclass, a FakeTensor, None),
// an active __torch_function__ mode, and torch.jit tracing (which records calls it sees through
// torch.ops). torch.compile never calls it: the handle's __call__ takes the op overload there.
//
// It saves torch's Python-to-boxed entry (invokeOperatorFromPython) and the handle's frames: on a
// 2-core machine k(a, b) went from 2.89 to 1.71 us (a + b: 1.27 us; scripts/call_overhead.py).
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <new>
#include <optional>
#include <vector>

namespace workbench {
namespace {

struct FastCall {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  // Placement-constructed in fast_call_new, destroyed in fast_call_dealloc (a PyObject's memory
  // comes from Python's allocator).
  struct State {
    c10::OperatorHandle op;
    std::vector<c10::IValue> tail;  // the attributes' values, then the variant's qualified name
    Py_ssize_t n_inputs;
    size_t n_returns;
  };
  std::optional<State> state;
};

// Releases the GIL for the op's run, as torch's own bindings do (a CPU variant may run long; a
// Python kernel below takes the GIL again).
struct WithoutGil {
  WithoutGil() : saved(PyEval_SaveThread()) {}
  ~WithoutGil() { PyEval_RestoreThread(saved); }
  PyThreadState* saved;
};

// Whether the call can go straight to the dispatcher (see the top). torch's own check of a plain
// tensor for __torch_function__ (check_has_torch_function) asks only whether a mode is active; it
// is not exported, so this asks that itself.
bool plain_call(PyObject* const* items, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!THPVariable_CheckExact(items[i])) return false;
  return !at::impl::torch_function_mode_enabled() && !torch::jit::tracer::isTracing();
}

PyObject* fast_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  auto& s = *reinterpret_cast<FastCall*>(self)->state;
  // One positional argument: the handle's tuple of tensors.
  if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != nullptr || !PyTuple_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "workbench fast call: expected one tuple of tensors");
    return nullptr;
  }
  PyObject* tensors = args[0];
  const Py_ssize_t n = PyTuple_GET_SIZE(tensors);
  PyObject* const* items = &PyTuple_GET_ITEM(tensors, 0);
  if (n != s.n_inputs || !plain_call(items, n)) Py_RETURN_NOTIMPLEMENTED;
  torch::jit::Stack stack;
  stack.reserve(n + s.tail.size());
  for (Py_ssize_t i = 0; i < n; ++i) stack.emplace_back(THPVariable_Unpack(items[i]));
  stack.insert(stack.end(), s.tail.begin(), s.tail.end());
  {
    WithoutGil released;
    s.op.callBoxed(stack);
  }
  if (s.n_returns == 1) return THPVariable_Wrap(std::move(stack[0]).toTensor());
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(s.n_returns));
  if (out == nullptr) return nullptr;
  for (size_t i = 0; i < s.n_returns; ++i) {
    PyObject* t = THPVariable_Wrap(std::move(stack[i]).toTensor());
    if (t == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, static_cast<Py_ssize_t>(i), t);
  }
  return out;
  END_HANDLE_TH_ERRORS
}

// Immutable: a copy, shallow or deep, is the object itself (copy.deepcopy of a model holding a
// Kernel handle copies the handle's attributes).
PyObject* fast_call_self(PyObject* self, PyObject*) { return Py_NewRef(self); }

PyMethodDef fast_call_methods[] = {
    {"__copy__", fast_call_self, METH_NOARGS, nullptr},
    {"__deepcopy__", fast_call_self, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

void fast_call_dealloc(PyObject* self) {
  reinterpret_cast<FastCall*>(self)->state.~optional();
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject* fast_call_type() {
  static PyTypeObject type = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "workbench.FastCall";
    t.tp_basicsize = sizeof(FastCall);
    t.tp_dealloc = fast_call_dealloc;
    t.tp_call = PyVectorcall_Call;
    t.tp_vectorcall_offset = offsetof(FastCall, vectorcall);
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    t.tp_doc = "A Kernel handle's call of its op: (tensors,) -> the op's outputs, or NotImplemented.";
    t.tp_methods = fast_call_methods;
    return t;
  }();
  static const bool ready = PyType_Ready(&type) == 0;
  return ready ? &type : nullptr;
}

// One value of the schema's argument `arg` (a float, int, bool or str attribute) from Python.
c10::IValue tail_value(const c10::Argument& arg, PyObject* value) {
  switch (arg.type()->kind()) {
    case c10::TypeKind::FloatType:
      if (PyFloat_Check(value) || PyLong_Check(value)) return PyFloat_AsDouble(value);
      break;
    case c10::TypeKind::BoolType:
      if (PyBool_Check(value)) return value == Py_True;
      break;
    case c10::TypeKind::IntType:
      if (PyLong_Check(value) && !PyBool_Check(value)) return static_cast<int64_t>(PyLong_AsLongLong(value));
      break;
    case c10::TypeKind::StringType:
      if (PyUnicode_Check(value)) return std::string(PyUnicode_AsUTF8(value));
      break;
    default:
      break;
  }
  TORCH_CHECK_TYPE(false, "workbench fast call: argument '", arg.name(), "' is ", arg.type()->str(), "; got ",
                   Py_TYPE(value)->tp_name);
  return {};  // not reached
}

}  // namespace
}  // namespace workbench

// fast_call_new(b"workbench::vector_add", n_inputs, (attribute values..., "name@build")): the
// handle's caller, or None where the op's schema is not one it serves (an argument after the
// inputs that is not a float, int, bool or str; a return that is not a Tensor). Called through
// ctypes with the GIL held (PYFUNCTYPE); an error is a Python exception.
extern "C" PyObject* workbench_fast_call_new(const char* op_name, Py_ssize_t n_inputs, PyObject* tail) {
  using namespace workbench;
  HANDLE_TH_ERRORS
  PyTypeObject* type = fast_call_type();
  if (type == nullptr) return nullptr;
  TORCH_CHECK_TYPE(PyTuple_Check(tail), "workbench fast call: the attribute values must be a tuple");
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(op_name, "");
  const c10::FunctionSchema& schema = op.schema();
  const Py_ssize_t n_tail = PyTuple_GET_SIZE(tail);
  TORCH_CHECK(static_cast<size_t>(n_inputs + n_tail) == schema.arguments().size(), "workbench fast call: ",
              op_name, " takes ", schema.arguments().size(), " arguments; given ", n_inputs, " inputs and ", n_tail,
              " more");
  for (Py_ssize_t i = 0; i < n_inputs; ++i)
    if (schema.arguments()[i].type()->kind() != c10::TypeKind::TensorType) Py_RETURN_NONE;
  for (const auto& r : schema.returns())
    if (r.type()->kind() != c10::TypeKind::TensorType) Py_RETURN_NONE;
  std::vector<c10::IValue> values;
  values.reserve(n_tail);
  for (Py_ssize_t i = 0; i < n_tail; ++i) {
    const auto& arg = schema.arguments()[n_inputs + i];
    const auto kind = arg.type()->kind();
    if (kind != c10::TypeKind::FloatType && kind != c10::TypeKind::IntType && kind != c10::TypeKind::BoolType &&
        kind != c10::TypeKind::StringType)
      Py_RETURN_NONE;
    values.push_back(tail_value(arg, PyTuple_GET_ITEM(tail, i)));
  }
  auto* self = reinterpret_cast<FastCall*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  new (&self->state) std::optional<FastCall::State>(
      FastCall::State{op, std::move(values), n_inputs, schema.returns().size()});
  self->vectorcall = fast_call;
  return reinterpret_cast<PyObject*>(self);
  END_HANDLE_TH_ERRORS
}

// The NumPy front end's extension module (workbench/ship/ndarray.py builds it with pybind11 and the host
// compiler; no torch anywhere). It opens the same torch-free libraries the torch harness opens, an
// op's binding (WbOpBinding, wb_op.h) and its variants (WbVariantInfo, wb_variant.h), and runs a
// call through the call contract every front end runs (bindings/harness/call_contract.h, on the op's
// declaration parsed by op_decl.cpp): check() is its call check and gives the outputs' shapes;
// run() its empty-tensor guard and its launch, on buffers that passed check() and NumPy's own checks
// (layout, byte order, aliasing: ndarray.py). CPU variants run on host memory directly, with a
// std::thread pool standing in for torch's; CUDA variants through cudaMalloc/cudaMemcpy staging,
// with CUDA events around the copies and around the kernel, so the caller sees the kernel's time
// and the transfers' apart.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "call_contract.h"
#include "library_host.h"
#include "wb_op.h"

// The declarations' parser and shape rule, compiled into this module (the build compiles one
// source; the torch harness compiles the same file on its own).
#include "op_decl.cpp"

#ifdef WB_NDARRAY_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using workbench::host_services;
using workbench::open_table;
using workbench::tl_threads;

// ---------------------------------------------------------------- libraries

// handle and abi_version always; the rest only where the ABI matches (else the layout may differ,
// and the caller refuses the library by its version).
py::dict open_variant(const std::string& path) {
  const auto* info = open_table<WbVariantInfo>(path, "workbench_variant_info");
  py::dict d("handle"_a = reinterpret_cast<uintptr_t>(info), "abi_version"_a = info->abi_version);
  if (info->abi_version != WB_ABI_VERSION) return d;
  py::list steps;
  for (int step : {WB_STEP_FORWARD, WB_STEP_BACKWARD})
    if (wb_launcher_for_step(info->launchers, step)) steps.append(step == WB_STEP_FORWARD ? "forward" : "backward");
  d["op"] = info->op;
  d["device"] = info->device == WB_DEVICE_CUDA ? "cuda" : "cpu";
  d["dtype_mask"] = info->dtypes;
  d["description"] = info->description;
  d["steps"] = steps;
  return d;
}

py::dict open_binding(const std::string& path) {
  const auto* table = open_table<WbOpBinding>(path, "workbench_op_binding");
  py::dict d("handle"_a = reinterpret_cast<uintptr_t>(table), "abi_version"_a = table->abi_version);
  if (table->abi_version == WB_BINDING_ABI_VERSION) d["op"] = table->op;
  return d;
}

// ---------------------------------------------------------------- devices

#ifdef WB_NDARRAY_WITH_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}
#endif

// (number of devices, why none): a machine without a GPU or driver answers (0, the runtime's words).
py::tuple device_count() {
#ifdef WB_NDARRAY_WITH_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the next call must not see it
    return py::make_tuple(0, std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e));
  }
  return py::make_tuple(n, n ? "" : "cudaGetDeviceCount found no device");
#else
  return py::make_tuple(0, "the NumPy front end was built without CUDA (no CUDA toolkit found)");
#endif
}

py::list devices() {
  py::list out;
#ifdef WB_NDARRAY_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    cuda_check(cudaGetDeviceProperties(&p, i), "cudaGetDeviceProperties");
    py::dict d;
    d["name"] = std::string(p.name);
    d["capability"] = py::make_tuple(p.major, p.minor);
    d["sms"] = p.multiProcessorCount;
    d["memory_bytes"] = static_cast<uint64_t>(p.totalGlobalMem);
    out.append(d);
  }
#endif
  return out;
}

#ifdef WB_NDARRAY_WITH_CUDA
// Device-to-device cudaMemcpy of `bytes`, timed `repeat` times with events (after one untimed
// copy): the copy ceiling a memory-bound kernel is measured against, without torch.
std::vector<double> copy_ms(size_t bytes, int repeat, int device) {
  py::gil_scoped_release unlocked;
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  void *src = nullptr, *dst = nullptr;
  cuda_check(cudaMalloc(&src, bytes), "cudaMalloc");
  std::unique_ptr<void, decltype(&cudaFree)> keep_src(src, cudaFree);
  cuda_check(cudaMalloc(&dst, bytes), "cudaMalloc");
  std::unique_ptr<void, decltype(&cudaFree)> keep_dst(dst, cudaFree);
  cuda_check(cudaMemset(src, 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  cuda_check(cudaEventCreate(&e0), "cudaEventCreate");
  cuda_check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<double> out;
  cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  for (int r = 0; r < repeat && err == cudaSuccess; ++r) {
    float ms = 0;
    cudaEventRecord(e0, nullptr);
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr);
    cudaEventRecord(e1, nullptr);
    err = cudaEventSynchronize(e1);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, e0, e1);
    out.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cuda_check(err, "the device-to-device copy");
  return out;
}
#endif

// ---------------------------------------------------------------- the call contract

using workbench::OpDecl;

// An array as the call contract reads it: its shape and NumPy dtype name (run() leaves the name
// empty: only the check compares dtypes).
struct NdArray {
  std::vector<int64_t> shape;
  std::string dtype;
  int64_t numel;
};

struct NdArg {
  std::string name;
  NdArray item;
  const workbench::DimPattern* dims;
  bool read;
};

// How the contract reads a NumPy call (call_contract.h's front end): Python's ValueError,
// TypeError and RuntimeError.
struct NdFront {
  using Arg = NdArg;
  static bool given(const NdArg&) { return true; }  // ndarray.py has refused anything but an ndarray
  // NumPy arrays are host memory: there is no device to differ (the Python twin skips this check).
  static bool same_device(const NdArg&, const NdArg&) { return true; }
  static std::string device_text(const NdArg&) { return "cpu"; }
  static bool same_dtype(const NdArg& a, const NdArg& b) { return a.item.dtype == b.item.dtype; }
  static std::string dtype_text(const NdArg& a) { return a.item.dtype; }
  static int wb_dtype(const NdArg& a) {
    for (int d = WB_FLOAT32; d <= WB_BFLOAT16; ++d)
      if (a.item.dtype == workbench::wb_dtype_name(d)) return d;
    return -1;
  }
  static int64_t dim(const NdArg& a) { return static_cast<int64_t>(a.item.shape.size()); }
  static const int64_t* sizes(const NdArg& a) { return a.item.shape.data(); }
  static int64_t numel(const NdArg& a) { return a.item.numel; }
  [[noreturn]] static void fail(workbench::CallFault fault, const std::string& message) {
    if (fault == workbench::CallFault::Value) throw py::value_error(message);
    if (fault == workbench::CallFault::Type) throw py::type_error(message);
    throw std::runtime_error(message);
  }
};

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The op's declaration (spec.fields(), op_decl.h's OpFields, a list per column), checked once per
// distinct declaration and kept for the process: a handle for check() and run().
uintptr_t declare(std::string op, std::string schema, std::string backward_schema, std::vector<std::string> inputs,
                  std::vector<std::string> input_dims, std::vector<bool> differentiable,
                  std::vector<bool> read_by_backward, std::vector<std::string> outputs,
                  std::vector<std::string> output_dims, std::vector<std::string> attrs,
                  std::vector<std::string> attr_kinds, std::vector<std::optional<double>> attr_min,
                  std::vector<std::optional<double>> attr_max, std::vector<bool> attr_finite) {
  const workbench::OpFields fields{op, schema, backward_schema, inputs, input_dims, differentiable,
                                   read_by_backward, outputs, output_dims, attrs, attr_kinds, attr_min,
                                   attr_max, attr_finite};
  static std::mutex mutex;
  static std::vector<std::unique_ptr<const OpDecl>> declared;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& d : declared)
    if (d->fields == fields) return reinterpret_cast<uintptr_t>(d.get());
  declared.push_back(std::make_unique<const OpDecl>(OpDecl::of(fields)));
  return reinterpret_cast<uintptr_t>(declared.back().get());
}

// The attribute values as the binding takes them: float ones in .f, int and bool ones in .i (by
// the declaration's kinds; a value past the declared ones by its Python type, for the count check).
std::vector<WbAttr> attrs_of(const OpDecl& d, const py::sequence& values) {
  std::vector<WbAttr> out(values.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const py::object v = values[i];
    const bool is_float = i < d.attrs.size() ? d.attrs[i].kind == "float" : py::isinstance<py::float_>(v);
    if (is_float) out[i].f = v.cast<double>();
    else out[i].i = v.cast<int64_t>();
  }
  return out;
}

// The call check of `step` on arrays of these shapes and dtype names (in schema order: a backward's
// gradients first), every message starting with `prefix`; returns the outputs' shapes.
std::vector<std::vector<int64_t>> check(uintptr_t op, int step, const std::string& prefix,
                                        const std::vector<std::vector<int64_t>>& shapes,
                                        const std::vector<std::string>& dtypes, const py::sequence& attrs) {
  const auto& d = *reinterpret_cast<const OpDecl*>(op);
  if (shapes.size() != dtypes.size()) throw py::value_error("check: one dtype per shape");
  std::vector<NdArray> arrays;
  arrays.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) arrays.push_back({shapes[i], dtypes[i], product(shapes[i])});
  size_t first = 0;
  const auto args = workbench::schema_args<NdFront>(d, step, arrays, &first);
  const workbench::ShapeBinder binder = workbench::check_call_as<NdFront>(prefix, d, args, first, attrs_of(d, attrs));
  return workbench::output_shapes<NdFront>(d, step, args, first, binder);
}

// ---------------------------------------------------------------- one run

struct Buffer {
  py::buffer_info info;
  bool read;
};

py::dict run_cpu(const WbOpBinding* b, const WbVariantInfo* v, int step, WbCall& call, int repeat, int warmup,
                 int threads, const std::string& label) {
  tl_threads = std::max(threads, 1);
  WbLaunch launch{};
  launch.device = -1;
  launch.host = &host_services;
  const size_t ws = workbench::workspace_bytes(*b, *v, step, call, launch);
  std::vector<std::max_align_t> workspace((ws + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
  call.workspace = ws ? workspace.data() : nullptr;
  std::vector<double> times;
  {
    py::gil_scoped_release unlocked;
    for (int r = 0; r < warmup + repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      workbench::launch_call<NdFront>(*b, *v, step, call, launch, "", label);
      const auto t1 = std::chrono::steady_clock::now();
      if (r >= warmup) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  py::dict d;
  d["kernel_ms_all"] = times;
  return d;
}

#ifdef WB_NDARRAY_WITH_CUDA
// Device memory for one call, freed on every way out (errors included).
struct DeviceArena {
  std::vector<void*> blocks;
  std::vector<cudaEvent_t> events;
  ~DeviceArena() {
    for (void* p : blocks) cudaFree(p);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  // `bytes` at the same address modulo 16 as `like` (cudaMalloc's blocks are 256-byte aligned), so a
  // NumPy view that is not 16-byte aligned stays so on the device and the variant takes the same
  // route (its scalar path). Only modulo 16: NumPy's own buffers start 16 bytes past a page, and
  // keeping that offset put every warp's 128-byte access of a 4-byte-per-thread kernel across two
  // 128-byte lines: vector_add/scalar at 2^26 ran at 58% of the copy rate (94% under torch); kept
  // modulo 16, 89% (results/gpu/<commit>/ndarray: a host offset of 4 still shows the 58%).
  char* alloc(size_t bytes, const void* like) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes + kKeptAlignment), "cudaMalloc");
    blocks.push_back(p);
    return static_cast<char*>(p) + (reinterpret_cast<uintptr_t>(like) % kKeptAlignment);
  }
  static constexpr uintptr_t kKeptAlignment = 16;  // the widest access a variant makes (a float4)
  cudaEvent_t event() {
    cudaEvent_t e;
    cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    events.push_back(e);
    return e;
  }
};

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

struct CudaTimes {
  std::vector<double> kernel_ms;
  double h2d_ms = 0, d2h_ms = 0, alloc_ms = 0;
  size_t h2d_bytes = 0, d2h_bytes = 0;
};

// Called without the GIL: stage the read inputs in, run, stage the outputs back.
CudaTimes run_cuda(const WbOpBinding* b, const WbVariantInfo* v, int step, WbCall& call,
                   const std::vector<Buffer>& ins, const std::vector<Buffer>& outs, int repeat, int warmup,
                   int device, const std::string& label) {
  CudaTimes t;
  const auto wall0 = std::chrono::steady_clock::now();
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  WbLaunch launch{};
  launch.device = device;
  launch.stream = nullptr;  // the legacy default stream: the copies and events below share it
  launch.host = &host_services;
  cuda_check(cudaDeviceGetAttribute(&launch.num_sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  DeviceArena arena;
  std::vector<char*> dev_out(outs.size());
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i].read) call.inputs[i].data = arena.alloc(ins[i].info.size * ins[i].info.itemsize, ins[i].info.ptr);
  for (size_t i = 0; i < outs.size(); ++i) {
    dev_out[i] = arena.alloc(outs[i].info.size * outs[i].info.itemsize, outs[i].info.ptr);
    call.outputs[i].data = dev_out[i];
  }
  const size_t ws = workbench::workspace_bytes(*b, *v, step, call, launch);
  call.workspace = ws ? arena.alloc(ws, nullptr) : nullptr;
  t.alloc_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();

  cudaEvent_t h0 = arena.event(), h1 = arena.event(), d0 = arena.event(), d1 = arena.event();
  cuda_check(cudaEventRecord(h0, nullptr), "cudaEventRecord");
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i].read) continue;
    const size_t bytes = ins[i].info.size * ins[i].info.itemsize;
    cuda_check(cudaMemcpy(call.inputs[i].data, ins[i].info.ptr, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
    t.h2d_bytes += bytes;
  }
  cuda_check(cudaEventRecord(h1, nullptr), "cudaEventRecord");

  std::vector<cudaEvent_t> k0, k1;
  for (int r = 0; r < repeat; ++r) {
    k0.push_back(arena.event());
    k1.push_back(arena.event());
  }
  for (int r = 0; r < warmup + repeat; ++r) {
    if (r >= warmup) cuda_check(cudaEventRecord(k0[r - warmup], nullptr), "cudaEventRecord");
    workbench::launch_call<NdFront>(*b, *v, step, call, launch, "", label);
    if (r >= warmup) cuda_check(cudaEventRecord(k1[r - warmup], nullptr), "cudaEventRecord");
  }
  cuda_check(cudaDeviceSynchronize(), "the kernel");  // an illegal address and the like show here

  cuda_check(cudaEventRecord(d0, nullptr), "cudaEventRecord");
  for (size_t i = 0; i < outs.size(); ++i) {
    const size_t bytes = outs[i].info.size * outs[i].info.itemsize;
    cuda_check(cudaMemcpy(outs[i].info.ptr, dev_out[i], bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
    t.d2h_bytes += bytes;
  }
  cuda_check(cudaEventRecord(d1, nullptr), "cudaEventRecord");
  cuda_check(cudaEventSynchronize(d1), "cudaEventSynchronize");
  for (int r = 0; r < repeat; ++r) t.kernel_ms.push_back(elapsed_ms(k0[r], k1[r]));
  t.h2d_ms = elapsed_ms(h0, h1);
  t.d2h_ms = elapsed_ms(d0, d1);
  return t;
}
#endif

// Runs `step` of a variant through its op's binding on C-contiguous buffers that passed check()
// (and ndarray.py's own checks): the contract's empty-tensor guard (nothing launched; the outputs
// zero-filled), else the launch, `warmup` + `repeat` times. An input the step does not read (the
// declaration says which) carries its shape alone: its data is not read, nor staged. Returns the
// timings in milliseconds and whether anything was launched; a variant's failure reads
// "variant '<label>' <step> failed: <its words> (status N)".
py::dict run(uintptr_t op, uintptr_t binding, uintptr_t variant, int step, int dtype, const py::list& inputs,
             const py::list& outputs, const py::sequence& attrs, int repeat, int warmup, int threads, int device,
             const std::string& label) {
  const auto& d = *reinterpret_cast<const OpDecl*>(op);
  const auto* b = reinterpret_cast<const WbOpBinding*>(binding);
  const auto* v = reinterpret_cast<const WbVariantInfo*>(variant);
  const size_t n_outputs = step == WB_STEP_FORWARD ? d.outputs.size() : d.differentiable.size();
  if (inputs.size() > WB_MAX_ARGS || outputs.size() != n_outputs || attrs.size() != d.attrs.size())
    throw py::value_error("run: at most 8 inputs, and the step's outputs (" + std::to_string(n_outputs) +
                          ") and the op's attributes (" + std::to_string(d.attrs.size()) + ")");
  if (repeat < 1 || warmup < 0) throw py::value_error("run: repeat must be >= 1 and warmup >= 0");
  // A second line behind the Python checks: a read-only output or a strided buffer is refused here
  // too (the buffer protocol raises for writing to a read-only array).
  std::vector<NdArray> arrays;
  std::vector<Buffer> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back({py::reinterpret_borrow<py::buffer>(inputs[i]).request(), true});
    arrays.push_back({std::vector<int64_t>(ins.back().info.shape.begin(), ins.back().info.shape.end()), "",
                      ins.back().info.size});
  }
  std::vector<std::vector<int64_t>> out_shapes;
  for (size_t i = 0; i < outputs.size(); ++i) {
    outs.push_back({py::reinterpret_borrow<py::buffer>(outputs[i]).request(true), true});
    out_shapes.emplace_back(outs.back().info.shape.begin(), outs.back().info.shape.end());
  }
  for (const auto* list : {&ins, &outs})
    for (const Buffer& buf : *list) {
      py::ssize_t expected = buf.info.itemsize;
      for (py::ssize_t k = buf.info.ndim - 1; k >= 0; --k) {
        if (buf.info.shape[k] > 1 && buf.info.strides[k] != expected)
          throw py::value_error("run: every buffer must be C-contiguous");
        expected *= buf.info.shape[k];
      }
    }
  size_t first = 0;
  const auto args = workbench::schema_args<NdFront>(d, step, arrays, &first);
  if (workbench::nothing_to_launch<NdFront>(args, out_shapes)) {
    for (const Buffer& o : outs) std::memset(o.info.ptr, 0, static_cast<size_t>(o.info.size * o.info.itemsize));
    return py::dict("kernel_ms_all"_a = std::vector<double>(), "launched"_a = false);
  }
  WbCall call = workbench::wb_call(dtype, ins.size(), outs.size(), attrs_of(d, attrs));
  for (size_t i = 0; i < ins.size(); ++i) {
    ins[i].read = args[i].read;
    call.inputs[i] = workbench::wb_tensor(args[i].read ? ins[i].info.ptr : nullptr,
                                          static_cast<int64_t>(arrays[i].shape.size()), arrays[i].shape.data(),
                                          arrays[i].numel);
  }
  for (size_t i = 0; i < outs.size(); ++i)
    call.outputs[i] = workbench::wb_tensor(outs[i].info.ptr, static_cast<int64_t>(out_shapes[i].size()),
                                           out_shapes[i].data(), outs[i].info.size);
  if (v->device == WB_DEVICE_CUDA) {
#ifdef WB_NDARRAY_WITH_CUDA
    CudaTimes t;
    {
      py::gil_scoped_release unlocked;
      t = run_cuda(b, v, step, call, ins, outs, repeat, warmup, device, label);
    }
    py::dict r;
    r["kernel_ms_all"] = t.kernel_ms;
    r["h2d_ms"] = t.h2d_ms;
    r["d2h_ms"] = t.d2h_ms;
    r["h2d_bytes"] = t.h2d_bytes;
    r["d2h_bytes"] = t.d2h_bytes;
    r["alloc_ms"] = t.alloc_ms;
    r["launched"] = true;
    return r;
#else
    throw std::runtime_error("the NumPy front end was built without CUDA: it cannot run a CUDA variant");
#endif
  }
  py::dict r = run_cpu(b, v, step, call, repeat, warmup, threads, label);
  r["launched"] = true;
  return r;
}

}  // namespace

PYBIND11_MODULE(wb_ndarray_ext, m) {
  m.doc() = "The workbench's NumPy front end: torch-free variant libraries on NumPy buffers.";
  m.attr("abi_version") = WB_ABI_VERSION;
  m.attr("binding_abi_version") = WB_BINDING_ABI_VERSION;
#ifdef WB_NDARRAY_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  m.def("open_variant", &open_variant, py::arg("path"));
  m.def("open_binding", &open_binding, py::arg("path"));
  m.def("device_count", &device_count);
  m.def("devices", &devices);
#ifdef WB_NDARRAY_WITH_CUDA
  m.def("copy_ms", &copy_ms, py::arg("bytes"), py::arg("repeat") = 10, py::arg("device") = 0);
#endif
  m.def("declare", &declare, py::arg("op"), py::arg("schema"), py::arg("backward_schema"), py::arg("inputs"),
        py::arg("input_dims"), py::arg("differentiable"), py::arg("read_by_backward"), py::arg("outputs"),
        py::arg("output_dims"), py::arg("attrs"), py::arg("attr_kinds"), py::arg("attr_min"), py::arg("attr_max"),
        py::arg("attr_finite"));
  m.def("check", &check, py::arg("op"), py::arg("step"), py::arg("prefix"), py::arg("shapes"), py::arg("dtypes"),
        py::arg("attrs"));
  m.def("run", &run, py::arg("op"), py::arg("binding"), py::arg("variant"), py::arg("step"), py::arg("dtype"),
        py::arg("inputs"), py::arg("outputs"), py::arg("attrs"), py::arg("repeat") = 1, py::arg("warmup") = 0,
        py::arg("threads") = 1, py::arg("device") = 0, py::arg("label") = "");
}

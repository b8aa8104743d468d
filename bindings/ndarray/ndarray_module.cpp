// The NumPy front end's extension module (workbench/ship/ndarray.py builds it with pybind11 and the host
// compiler; no torch anywhere). It opens the same torch-free libraries the torch harness opens, an
// op's binding (WbOpBinding, wb_op.h) and its variants (WbVariantInfo, wb_variant.h), and runs one
// step on buffers the Python side has already checked against the op's spec: CPU variants on host
// memory directly, with a std::thread pool standing in for torch's; CUDA variants through
// cudaMalloc/cudaMemcpy staging, with CUDA events around the copies and around the kernel, so the
// caller sees the kernel's time and the transfers' apart.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "wb_op.h"

#ifdef WB_NDARRAY_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

// ---------------------------------------------------------------- the host thread pool

thread_local int tl_threads = 1;  // set per call; parallel_for runs on the calling thread

// Splits [begin, end) into at most tl_threads chunks of at least `grain` elements; the caller's
// thread takes the first chunk. Threads are started per call: CPU variants here serve tests and
// NumPy scripts, where a pool's bookkeeping would buy little.
void host_parallel_for(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t by_grain = (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1);
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(tl_threads, by_grain));
  if (chunks == 1) {
    body(ctx, begin, end);
    return;
  }
  std::vector<std::thread> workers;
  for (int64_t c = 1; c < chunks; ++c)
    workers.emplace_back(body, ctx, begin + n * c / chunks, begin + n * (c + 1) / chunks);
  body(ctx, begin, begin + n / chunks);
  for (auto& w : workers) w.join();
}

const WbHost host_services = {host_parallel_for};

// ---------------------------------------------------------------- libraries

// The table a library exports through `symbol` (a function returning a pointer to it).
template <typename Table>
const Table* open_table(const std::string& path, const char* symbol) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: kernels may be in flight
  if (!handle) throw std::runtime_error(std::string("cannot load ") + path + ": " + dlerror());
  void* fn = dlsym(handle, symbol);
  if (!fn) throw std::runtime_error(path + " does not export " + symbol);
  return reinterpret_cast<const Table* (*)()>(fn)();
}

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

// ---------------------------------------------------------------- one step

struct Buffer {
  py::buffer_info info;
  bool read;
};

WbTensor tensor_of(const py::buffer_info& b, void* data) {
  WbTensor t{};
  t.data = data;
  t.ndim = static_cast<int>(b.ndim);
  for (int d = 0; d < t.ndim; ++d) t.sizes[d] = b.shape[d];
  t.numel = b.size;
  return t;
}

void fill_attrs(WbCall& call, const py::list& attrs) {
  call.n_attrs = static_cast<int>(attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) {
    const py::object v = attrs[i];
    if (py::isinstance<py::float_>(v)) call.attrs[i].f = v.cast<double>();
    else call.attrs[i].i = v.cast<int64_t>();  // int and bool attributes
  }
}

const char* step_name(int step) { return step == WB_STEP_FORWARD ? "forward" : "backward"; }

void check_status(int status, const WbVariantInfo* info, int step) {
  if (status != WB_OK)
    throw std::runtime_error(std::string(step_name(step)) + " failed: " + info->status_string(status) + " (status " +
                             std::to_string(status) + ")");
}

py::dict run_cpu(const WbOpBinding* b, const WbVariantInfo* v, int step, WbCall& call, int repeat, int warmup,
                 int threads) {
  tl_threads = std::max(threads, 1);
  WbLaunch launch{};
  launch.device = -1;
  launch.host = &host_services;
  const size_t ws = b->workspace_bytes ? b->workspace_bytes(step, &call, v->launchers, &launch) : 0;
  std::vector<std::max_align_t> workspace((ws + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
  call.workspace = ws ? workspace.data() : nullptr;
  std::vector<double> times;
  {
    py::gil_scoped_release unlocked;
    for (int r = 0; r < warmup + repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const int status = b->run(step, &call, v->launchers, &launch);
      const auto t1 = std::chrono::steady_clock::now();
      check_status(status, v, step);
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
                   int device) {
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
  const size_t ws = b->workspace_bytes ? b->workspace_bytes(step, &call, v->launchers, &launch) : 0;
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
    check_status(b->run(step, &call, v->launchers, &launch), v, step);
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

// Runs `step` of a variant through its op's binding. `inputs` and `outputs` are C-contiguous
// buffers the Python side checked against the spec; read[i] false: input i's shape alone counts
// (its data is not read, nor staged). Returns the timings in milliseconds.
py::dict run(uintptr_t binding, uintptr_t variant, int step, int dtype, const py::list& inputs,
             const std::vector<bool>& read, const py::list& outputs, const py::list& attrs, int repeat, int warmup,
             int threads, int device) {
  const auto* b = reinterpret_cast<const WbOpBinding*>(binding);
  const auto* v = reinterpret_cast<const WbVariantInfo*>(variant);
  if (inputs.size() > WB_MAX_ARGS || outputs.size() > WB_MAX_ARGS || attrs.size() > WB_MAX_ARGS ||
      read.size() != inputs.size())
    throw py::value_error("run: at most 8 inputs, outputs and attributes, and one read flag per input");
  if (repeat < 1 || warmup < 0) throw py::value_error("run: repeat must be >= 1 and warmup >= 0");
  std::vector<Buffer> ins, outs;
  WbCall call{};
  call.dtype = dtype;
  call.n_inputs = static_cast<int>(inputs.size());
  call.n_outputs = static_cast<int>(outputs.size());
  // A second line behind the Python checks: a read-only output or a strided buffer is refused here
  // too (the buffer protocol raises for writing to a read-only array).
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back({py::reinterpret_borrow<py::buffer>(inputs[i]).request(), read[i]});
    call.inputs[i] = tensor_of(ins.back().info, read[i] ? ins.back().info.ptr : nullptr);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    outs.push_back({py::reinterpret_borrow<py::buffer>(outputs[i]).request(true), true});
    call.outputs[i] = tensor_of(outs.back().info, outs.back().info.ptr);
  }
  for (const auto* list : {&ins, &outs})
    for (const Buffer& buf : *list) {
      py::ssize_t expected = buf.info.itemsize;
      for (py::ssize_t d = buf.info.ndim - 1; d >= 0; --d) {
        if (buf.info.shape[d] > 1 && buf.info.strides[d] != expected)
          throw py::value_error("run: every buffer must be C-contiguous");
        expected *= buf.info.shape[d];
      }
    }
  fill_attrs(call, attrs);
  if (v->device == WB_DEVICE_CUDA) {
#ifdef WB_NDARRAY_WITH_CUDA
    CudaTimes t;
    {
      py::gil_scoped_release unlocked;
      t = run_cuda(b, v, step, call, ins, outs, repeat, warmup, device);
    }
    py::dict d;
    d["kernel_ms_all"] = t.kernel_ms;
    d["h2d_ms"] = t.h2d_ms;
    d["d2h_ms"] = t.d2h_ms;
    d["h2d_bytes"] = t.h2d_bytes;
    d["d2h_bytes"] = t.d2h_bytes;
    d["alloc_ms"] = t.alloc_ms;
    return d;
#else
    throw std::runtime_error("the NumPy front end was built without CUDA: it cannot run a CUDA variant");
#endif
  }
  return run_cpu(b, v, step, call, repeat, warmup, threads);
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
  m.def("run", &run, py::arg("binding"), py::arg("variant"), py::arg("step"), py::arg("dtype"), py::arg("inputs"),
        py::arg("read"), py::arg("outputs"), py::arg("attrs"), py::arg("repeat") = 1, py::arg("warmup") = 0,
        py::arg("threads") = 1, py::arg("device") = 0);
}

// The registries (op declarations, op bindings, variant libraries) and the control plane through
// which Python fills them: plain-C entry points, and the declaration's typed op (define_op).
// Libraries are dlopen-ed and never closed: a handle to an older build, or an autograd graph
// recorded with it, must stay valid.
#include "harness.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/library.h>

#ifdef WORKBENCH_WITH_CUDA
// c10's stream header rather than ATen/cuda/CUDAContext.h: the latter pulls in cuBLAS and cuSPARSE
// headers, which a minimal CUDA toolkit lacks and which would slow every harness build.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace workbench {
namespace {

std::mutex registry_mutex;
// Bumped by every registration: a kernel's cached look-up of a variant and binding (op_kernel.cpp)
// holds while it is unchanged.
std::atomic<uint64_t> generation{1};
// "op/name" -> newest build, and "op/name@build" -> that build.
std::map<std::string, std::shared_ptr<const Variant>> variants;
std::map<std::string, std::shared_ptr<const Binding>> bindings;  // op -> newest binding
std::map<std::string, std::shared_ptr<const OpDecl>> decls;      // op -> declaration

void host_parallel_for(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}
const WbHost host_services = {host_parallel_for};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      out += ' ';
      continue;
    }
    out += ch;
  }
  return out + "\"";
}

std::string describe(const Variant& v) {
  std::ostringstream js;
  js << "{\"op\": " << json_string(v.op) << ", \"name\": " << json_string(v.name)
     << ", \"build_id\": " << json_string(v.build_id) << ", \"path\": " << json_string(v.path)
     << ", \"device\": " << json_string(v.info->device == WB_DEVICE_CUDA ? "cuda" : "cpu") << ", \"dtypes\": [";
  bool first = true;
  for (int d = WB_FLOAT32; d <= WB_BFLOAT16; ++d)
    if (v.info->dtypes & (1u << d)) {
      js << (first ? "" : ", ") << json_string(wb_dtype_name(d));
      first = false;
    }
  js << "], \"steps\": [";
  const char* step_names[] = {"forward", "backward"};
  first = true;
  for (int step = WB_STEP_FORWARD; step <= WB_STEP_BACKWARD; ++step)
    if (wb_launcher_for_step(v.info->launchers, step)) {
      js << (first ? "" : ", ") << json_string(step_names[step]);
      first = false;
    }
  js << "], \"description\": " << json_string(v.info->description ? v.info->description : "") << "}";
  return js.str();
}

// A library's exported table: its entry point `symbol` looked up and the table's ABI version
// checked (`kind`: "variant" or "binding"; `how_to_export`: what the source must end with).
template <class Table>
const Table* exported_table(const std::string& path, const char* symbol, const char* kind, int abi,
                            const char* how_to_export) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle, "workbench: could not load library ", path, ": ", dlerror());
  auto fn = reinterpret_cast<const Table* (*)()>(dlsym(handle, symbol));
  TORCH_CHECK(fn, "workbench: ", path, " exports no ", symbol, "(); ", how_to_export);
  const Table* table = fn();
  TORCH_CHECK(table && table->abi_version == abi, "workbench: ", path, " was built against ", kind, " ABI ",
              table ? table->abi_version : -1, ", this harness speaks ", abi, "; rebuild it");
  return table;
}

// dlopen a variant library, validate its descriptor, and register it. Returns its description
// (JSON) for the Python side.
std::string register_variant(const std::string& op, const std::string& name, const std::string& build_id,
                             const std::string& path, const std::string& contract) {
  TORCH_CHECK_VALUE(!name.empty() && name.find('@') == std::string::npos && name.find('/') == std::string::npos,
                    "workbench: variant name must be non-empty and contain neither '@' nor '/'; got '", name, "'");
  const WbVariantInfo* info = exported_table<WbVariantInfo>(
      path, "workbench_variant_info", "variant", WB_ABI_VERSION, "a variant source must end with WB_EXPORT_VARIANT(...)");
  TORCH_CHECK_VALUE(info->op && op == info->op, "workbench: the source for ", op, "/", name,
                    " exports a variant of op '", info->op ? info->op : "?", "', not '", op, "'");
  TORCH_CHECK_VALUE(info->launchers && info->status_string, "workbench: ", path, " has no launcher table");
  auto v = std::make_shared<const Variant>(Variant{op, name, build_id, path, contract, info});
  std::lock_guard<std::mutex> lock(registry_mutex);
  variants[op + "/" + v->qualified()] = v;
  variants[op + "/" + name] = v;
  ++generation;
  return describe(*v);
}

std::string register_binding(const std::string& op, const std::string& path, const std::string& contract) {
  const WbOpBinding* table = exported_table<WbOpBinding>(
      path, "workbench_op_binding", "binding", WB_BINDING_ABI_VERSION,
      "an op's binding must end with WB_EXPORT_BINDING(...)");
  TORCH_CHECK_VALUE(table->op && op == table->op, "workbench: the binding ", path, " is for op '",
                    table->op ? table->op : "?", "', not '", op, "'");
  TORCH_CHECK_VALUE(table->run, "workbench: ", path, " has no run function");
  std::lock_guard<std::mutex> lock(registry_mutex);
  bindings[op] = std::make_shared<const Binding>(Binding{op, path, contract, table});
  ++generation;
  return "{}";
}

// torch.ops.workbench_harness.define_op(*spec.fields()): the declaration as data, a list per column
// (op_decl.h's OpFields). Declares the op's schemas and the generic kernel for CPU and CUDA.
// Declaring it again with the same fields is a no-op (false); with others it is refused (the
// dispatcher cannot change a schema).
bool define_op(std::string op, std::string schema, std::string backward_schema, c10::List<std::string> inputs,
               c10::List<std::string> input_dims, c10::List<bool> differentiable, c10::List<bool> read_by_backward,
               c10::List<std::string> outputs, c10::List<std::string> output_dims, c10::List<std::string> attrs,
               c10::List<std::string> attr_kinds, c10::List<std::optional<double>> attr_min,
               c10::List<std::optional<double>> attr_max, c10::List<bool> attr_finite) {
  const OpFields fields{op, schema, backward_schema, inputs.vec(), input_dims.vec(), differentiable.vec(),
                        read_by_backward.vec(), outputs.vec(), output_dims.vec(), attrs.vec(), attr_kinds.vec(),
                        attr_min.vec(), attr_max.vec(), attr_finite.vec()};
  std::shared_ptr<const OpDecl> decl;
  try {
    decl = std::make_shared<const OpDecl>(OpDecl::of(fields));
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = decls.find(op);
    if (it != decls.end()) {
      TORCH_CHECK_VALUE(it->second->fields == fields, "workbench: op '", op,
                        "' is already declared in this process with other inputs, attributes or outputs (",
                        it->second->fields.forward_schema, "); the dispatcher cannot change a schema; restart the "
                        "process to declare it anew");
      return false;
    }
    decls[op] = decl;
  }
  register_op_kernels(*decl);
  return true;
}

std::string loaded_variants(const std::string& op) {  // a JSON list of their descriptions
  std::string js;
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& kv : variants)
    if (kv.second->op == op && kv.first == op + "/" + kv.second->name)
      js += (js.empty() ? "" : ", ") + describe(*kv.second);
  return "[" + js + "]";
}

std::string harness_info() {
#ifdef WORKBENCH_WITH_CUDA
  const bool cuda = true;
#else
  const bool cuda = false;
#endif
  std::ostringstream js;
  js << "{\"abi_version\": " << WB_ABI_VERSION << ", \"binding_abi_version\": " << WB_BINDING_ABI_VERSION
     << ", \"cuda\": " << (cuda ? "true" : "false") << "}";
  return js.str();
}

#ifdef WORKBENCH_WITH_CUDA
int multiprocessor_count(int device) {
  static std::mutex mutex;
  static std::map<int, int> counts;  // a device attribute query per launch would cost ~1 us
  std::lock_guard<std::mutex> lock(mutex);
  auto it = counts.find(device);
  if (it != counts.end()) return it->second;
  int n = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
  TORCH_CHECK(err == cudaSuccess, "workbench: cannot read the multiprocessor count of cuda:", device, ": ",
              cudaGetErrorString(err));
  return counts[device] = n;
}
#endif

}  // namespace

uint64_t registry_generation() { return generation.load(std::memory_order_acquire); }

std::shared_ptr<const Variant> find_variant(const std::string& op, const std::string& name) {
  const std::string key = op + "/" + name;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = variants.find(key);
  if (it != variants.end()) return it->second;
  std::string loaded;
  for (const auto& kv : variants)
    if (kv.second->op == op && kv.first == op + "/" + kv.second->name)
      loaded += (loaded.empty() ? "" : ", ") + kv.second->name;
  TORCH_CHECK_VALUE(false, "workbench::", op, ": variant '", name, "' is not loaded in this process (loaded: ",
                    loaded.empty() ? "none" : loaded, "); call workbench.load('", op, "', '", name, "') first");
}

std::shared_ptr<const Binding> find_binding(const std::string& op) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = bindings.find(op);
  TORCH_CHECK(it != bindings.end(), "workbench::", op, ": no binding is loaded for this op; call workbench.load('",
              op, "', ...) first");
  return it->second;
}

std::shared_ptr<const OpDecl> find_decl(const std::string& op) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = decls.find(op);
  return it == decls.end() ? nullptr : it->second;
}

WbLaunch launch_for(const at::Tensor& t) {
  WbLaunch launch{};
  launch.host = &host_services;
#ifdef WORKBENCH_WITH_CUDA
  if (t.is_cuda()) {
    launch.device = t.get_device();
    launch.stream = c10::cuda::getCurrentCUDAStream(launch.device).stream();
    launch.num_sms = multiprocessor_count(launch.device);
  }
#endif
  return launch;
}

}  // namespace workbench

// The control plane is plain C, called from Python through ctypes: registering a library or
// declaring an op takes no tensors, so it has no business in the dispatcher. Errors come back as
// text, never as a C++ exception across the C boundary.
namespace {
int copy_out(const std::string& text, char* out, size_t out_len) {
  if (out && out_len) {
    const size_t n = text.size() < out_len - 1 ? text.size() : out_len - 1;
    std::memcpy(out, text.data(), n);
    out[n] = 0;
  }
  return static_cast<int>(text.size());
}

template <typename Fn>
int guarded(char* out, size_t out_len, Fn&& fn) {
  try {
    copy_out(fn(), out, out_len);
    return 0;
  } catch (const c10::Error& e) {
    copy_out(e.what_without_backtrace(), out, out_len);
  } catch (const std::exception& e) {
    copy_out(e.what(), out, out_len);
  }
  return 1;
}
}  // namespace

#define WB_CONTROL extern "C" __attribute__((visibility("default"))) int

// 0 and the variant's JSON description in `out`, or 1 and the error message.
WB_CONTROL workbench_register_variant(const char* op, const char* name, const char* build_id, const char* path,
                                      const char* contract, char* out, size_t out_len) {
  return guarded(out, out_len, [&] { return workbench::register_variant(op, name, build_id, path, contract); });
}

WB_CONTROL workbench_register_binding(const char* op, const char* path, const char* contract, char* out,
                                      size_t out_len) {
  return guarded(out, out_len, [&] { return workbench::register_binding(op, path, contract); });
}

// 0 and a JSON list of the op's loaded variants in `out`.
WB_CONTROL workbench_loaded_variants(const char* op, char* out, size_t out_len) {
  return guarded(out, out_len, [&] { return workbench::loaded_variants(op); });
}

WB_CONTROL workbench_harness_info(char* out, size_t out_len) {
  return guarded(out, out_len, [] { return workbench::harness_info(); });
}

// The namespace, claimed once; each op's schemas are added at its declaration (define_op).
TORCH_LIBRARY(workbench, m) {}

// The declaration's way in: typed lists through the dispatcher (no text to parse).
TORCH_LIBRARY(workbench_harness, m) {
  m.def("define_op(str op, str schema, str backward_schema, str[] inputs, str[] input_dims, bool[] differentiable, "
        "bool[] read_by_backward, str[] outputs, str[] output_dims, str[] attrs, str[] attr_kinds, "
        "float?[] attr_min, float?[] attr_max, bool[] attr_finite) -> bool",
        &workbench::define_op);
}

// The variant registry and the checks shared by every op: loads variant libraries (dlopen), keeps
// them keyed by (op, name) and (op, name@build), and lends CPU variants torch's thread pool.
#include "harness.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <dlfcn.h>
#include <torch/library.h>

#ifdef WORKBENCH_WITH_CUDA
// c10's stream header rather than ATen/cuda/CUDAContext.h: the latter pulls in cuBLAS and cuSPARSE
// headers, which a minimal CUDA toolkit lacks and which would slow every harness build.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace workbench {
namespace {

std::mutex registry_mutex;
// "op/name" -> newest build, and "op/name@build" -> that build. Libraries are never dlclose-d:
// a handle to an older build, or an autograd graph recorded with it, must stay valid.
std::map<std::string, std::shared_ptr<const Variant>> registry;

void host_parallel_for(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}
const WbHost host_services = {host_parallel_for};

const char* dtype_name(int d) {
  switch (d) {
    case WB_FLOAT32: return "float32";
    case WB_FLOAT64: return "float64";
    case WB_FLOAT16: return "float16";
    case WB_BFLOAT16: return "bfloat16";
  }
  return "?";
}

std::string dtype_list(unsigned mask) {
  std::string out;
  for (int d = WB_FLOAT32; d <= WB_BFLOAT16; ++d)
    if (mask & (1u << d)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
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

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) { out += ' '; continue; }
    out += ch;
  }
  return out + "\"";
}

std::string describe(const Variant& v) {
  std::ostringstream js;
  js << "{\"op\": " << json_string(v.op) << ", \"name\": " << json_string(v.name)
     << ", \"build_id\": " << json_string(v.build_id) << ", \"path\": " << json_string(v.path)
     << ", \"device\": " << json_string(v.info->device == WB_DEVICE_CUDA ? "cuda" : "cpu")
     << ", \"dtypes\": [";
  bool first = true;
  for (int d = WB_FLOAT32; d <= WB_BFLOAT16; ++d)
    if (v.info->dtypes & (1u << d)) { js << (first ? "" : ", ") << json_string(dtype_name(d)); first = false; }
  js << "], \"description\": " << json_string(v.info->description ? v.info->description : "") << "}";
  return js.str();
}

// dlopen a variant library, validate its descriptor, and register it. Returns its description
// (JSON) for the Python side.
std::string register_variant(const std::string& op, const std::string& name, const std::string& build_id,
                             const std::string& path) {
  TORCH_CHECK_VALUE(!name.empty() && name.find('@') == std::string::npos && name.find('/') == std::string::npos,
                    "workbench: variant name must be non-empty and contain neither '@' nor '/'; got '", name, "'");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle, "workbench: could not load variant library ", path, ": ", dlerror());
  using InfoFn = const WbVariantInfo* (*)();
  auto info_fn = reinterpret_cast<InfoFn>(dlsym(handle, "workbench_variant_info"));
  TORCH_CHECK(info_fn, "workbench: ", path,
              " exports no workbench_variant_info(); a variant source must end with WB_EXPORT_VARIANT(...)");
  const WbVariantInfo* info = info_fn();
  TORCH_CHECK(info && info->abi_version == WB_ABI_VERSION, "workbench: ", path, " was built against variant ABI ",
              info ? info->abi_version : -1, ", this harness speaks ", WB_ABI_VERSION, "; rebuild it");
  TORCH_CHECK_VALUE(info->op && op == info->op, "workbench: the source for ", op, "/", name,
                    " exports a variant of op '", info->op ? info->op : "?", "', not '", op, "'");
  TORCH_CHECK_VALUE(info->launchers && info->status_string, "workbench: ", path, " has no launcher table");
  auto v = std::make_shared<const Variant>(Variant{op, name, build_id, path, info});
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry[op + "/" + v->qualified()] = v;
  registry[op + "/" + name] = v;
  return describe(*v);
}

std::vector<std::string> loaded_variants(const std::string& op) {
  std::vector<std::string> names;
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& kv : registry)
    if (kv.second->op == op && kv.first == op + "/" + kv.second->name) names.push_back(describe(*kv.second));
  return names;
}

std::string harness_info() {
#ifdef WORKBENCH_WITH_CUDA
  const bool cuda = true;
#else
  const bool cuda = false;
#endif
  std::ostringstream js;
  js << "{\"abi_version\": " << WB_ABI_VERSION << ", \"cuda\": " << (cuda ? "true" : "false") << "}";
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

std::shared_ptr<const Variant> find_variant(const char* op, c10::string_view name) {
  const std::string key = std::string(op) + "/" + std::string(name);
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry.find(key);
  if (it != registry.end()) return it->second;
  std::string loaded;
  for (const auto& kv : registry)
    if (kv.second->op == op && kv.first == std::string(op) + "/" + kv.second->name)
      loaded += (loaded.empty() ? "" : ", ") + kv.second->name;
  TORCH_CHECK_VALUE(false, "workbench::", op, ": variant '", std::string(name), "' is not loaded in this process (loaded: ",
                    loaded.empty() ? "none" : loaded, "); call workbench.load('", op, "', '", std::string(name),
                    "') first");
}

void check_defined(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), "workbench::", op, ": ", arg, " must be a tensor, got None");
}

void check_same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), "workbench::", op, ": ", arg, " must be on the same device as ", ref_arg,
              " (", ref.device(), "); got ", arg, " on ", t.device());
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), "workbench::", op, ": ", arg, " must have the dtype of ",
                   ref_arg, " (", ref.scalar_type(), "); got ", t.scalar_type());
}

void check_same_shape(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  TORCH_CHECK_VALUE(t.sizes() == ref.sizes(), "workbench::", op, ": ", arg, " must have the shape of ", ref_arg,
                    " ", ref.sizes(), "; got ", t.sizes());
}

int check_variant_accepts(const char* op, const Variant& v, const char* arg, const at::Tensor& t) {
  const bool wants_cuda = v.info->device == WB_DEVICE_CUDA;
  TORCH_CHECK(wants_cuda ? t.is_cuda() : t.is_cpu(), "workbench::", op, ": variant '", v.name, "' runs on ",
              wants_cuda ? "CUDA" : "CPU", " tensors; ", arg, " is on ", t.device(),
              wants_cuda ? " (move it to a GPU, or use a CPU variant such as 'cpu')" : " (use a CUDA variant, or .cpu() it)");
  const int d = wb_dtype(t.scalar_type());
  TORCH_CHECK_TYPE(d >= 0 && (v.info->dtypes & (1u << d)), "workbench::", op, ": variant '", v.name,
                   "' supports dtypes ", dtype_list(v.info->dtypes), "; ", arg, " is ", t.scalar_type());
  return d;
}

at::Tensor workspace(size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
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

void check_status(const char* op, const Variant& v, const char* step, int status) {
  TORCH_CHECK(status == WB_OK, "workbench::", op, ": variant '", v.qualified(), "' ", step, " failed: ",
              v.info->status_string(status), " (status ", status, ")");
}

}  // namespace workbench

// The control plane is plain C, called from Python through ctypes: registering a library or
// describing the harness takes no tensors, so it has no business in the dispatcher (whose handling
// of tensor-less ops differs between torch releases). Errors come back as text, never as a C++
// exception across the C boundary.
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

// 0 and the variant's JSON description in `out`, or 1 and the error message.
extern "C" __attribute__((visibility("default"))) int workbench_register_variant(
    const char* op, const char* name, const char* build_id, const char* path, char* out, size_t out_len) {
  return guarded(out, out_len, [&] { return workbench::register_variant(op, name, build_id, path); });
}

// 0 and a JSON list of the op's loaded variants in `out`.
extern "C" __attribute__((visibility("default"))) int workbench_loaded_variants(const char* op, char* out,
                                                                                size_t out_len) {
  return guarded(out, out_len, [&] {
    std::string js = "[";
    for (const auto& d : workbench::loaded_variants(op)) js += (js.size() > 1 ? ", " : "") + d;
    return js + "]";
  });
}

extern "C" __attribute__((visibility("default"))) int workbench_harness_info(char* out, size_t out_len) {
  return guarded(out, out_len, [] { return workbench::harness_info(); });
}

// The namespace and its tensor ops are defined by each op's file (TORCH_LIBRARY_FRAGMENT); this
// block only claims the namespace, once.
TORCH_LIBRARY(workbench, m) {}

// The runner: the process a variant's library is loaded and called in when its caller must not run
// that code itself (the exercise judge, which starts it in a sandbox; an isolated check; a profiler
// or a sanitizer put in front of it). It owns no data: every input and output lives in memory the
// caller allocated and shares (device memory by CUDA IPC, host memory by a memfd passed with the
// message), and the caller says which call to make on which bytes. The runner makes the call and
// answers only whether it went: never a result, never a time. What the caller concludes, it reads
// from its own memory and its own clock.
//
// Torch-free: it opens the op's binding and the variant (wb_op.h, wb_variant.h), as the NumPy front
// end does, and runs calls through the same call contract (call_contract.h). The caller has checked
// each call against the op's declaration; the runner applies the contract's empty-tensor guard.
//
// Protocol: lines on the socket whose descriptor is the one argument (the caller's socketpair), one reply line per
// command ("ok ...", "error <hex text>", or "fatal <hex text>" once the device is unusable: a
// sticky CUDA error). Numbers are decimal; texts travel hex-encoded.
//   declare <hex declaration>                      the op (spec.declaration(), op_decl.h)
//   binding <path>                                 -> ok <op>
//   variant <path> <label>                         -> ok <op> <cpu|cuda> <dtype mask> <steps mask> <hex description>
//   arena <id> cuda <hex IPC handle> <bytes>       map the caller's device allocation
//   arena <id> host <bytes>                        map the memfd that comes with this message
//   drop <id>                                      unmap an arena (before its owner frees it)
//   call <step> <dtype> <n> {<arena> <offset> <ndim> <dims...>}*n <m> {...}*m <k> {<f|i> <value>}*k
//                                                  run it (inputs then outputs, schema order) and wait
//   batch <n>, then n "call" lines, then "go"      -> done: the n calls back to back, then one wait
//   marker                                         launch wb_runner_marker and wait (a profiler's
//                                                  boundary between loading and the checked calls)
//   threads <n>                                    CPU variants' threads
//   range <hex name>, end                          push, pop an NVTX range (a profiler's selection:
//                                                  ncu --nvtx-include name/)
//   own-memory                                     from now on each CUDA call runs on allocations of
//                                                  the runner's own, one per tensor (a sanitizer's
//                                                  bounds), its tensors copied in and its outputs back
// stdout is the caller's log, never the protocol: fd 1 goes to fd 2 before any library is opened.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "call_contract.h"
#include "library_host.h"
#include "op_decl.cpp"
#include "wb_op.h"

#ifdef WB_RUNNER_WITH_CUDA
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
__global__ void wb_runner_marker(int* sink) {
  if (sink) *sink = 1;
}
#endif

namespace {

using workbench::CallFault;

struct Failure {
  std::string text;
  bool fatal;
};

struct RunnerArg {
  std::string name;
  WbTensor item;
  const workbench::DimPattern* dims;
  bool read;
};

// The call contract's view of a call the caller has already checked: only the empty-tensor guard
// asks anything of it.
struct RunnerFront {
  using Arg = RunnerArg;
  static int64_t numel(const RunnerArg& a) { return a.item.numel; }
  [[noreturn]] static void fail(CallFault, const std::string& message) { throw Failure{message, false}; }
};

struct Arena {
  char* base = nullptr;
  size_t bytes = 0;
  bool cuda = false;
};

struct Call {
  int step = 0;
  WbCall call{};
  std::vector<WbTensor> inputs, outputs;
  size_t output_bytes[WB_MAX_ARGS] = {};
};

std::string hex(const std::string& text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

size_t element_size(int dtype) { return dtype == WB_FLOAT64 ? 8 : dtype == WB_FLOAT32 ? 4 : 2; }

class Runner {
 public:
  explicit Runner(int fd) : fd_(fd) {}

  int serve() {
    std::string line;
    while (read_line(&line)) {
      try {
        reply(handle(line));
      } catch (const Failure& f) {
        reply((f.fatal ? "fatal " : "error ") + hex(f.text));
        if (f.fatal) return 3;
      } catch (const std::exception& e) {
        reply("error " + hex(e.what()));
      }
    }
    return 0;
  }

 private:
  std::string handle(const std::string& line) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "declare") {
      std::string text;
      in >> text;
      decl_ = std::make_unique<workbench::OpDecl>(workbench::OpDecl::parse(unhex(text)));
      return "ok";
    }
    if (cmd == "binding") {
      std::string path;
      in >> path;
      binding_ = workbench::open_table<WbOpBinding>(path, "workbench_op_binding");
      if (binding_->abi_version != WB_BINDING_ABI_VERSION) throw Failure{"binding ABI version differs", false};
      return std::string("ok ") + binding_->op;
    }
    if (cmd == "variant") {
      std::string path;
      in >> path >> label_;
      variant_ = workbench::open_table<WbVariantInfo>(path, "workbench_variant_info");  // its initializers run here
      if (variant_->abi_version != WB_ABI_VERSION) throw Failure{"variant ABI version differs", false};
      unsigned steps = 0;
      for (int s : {WB_STEP_FORWARD, WB_STEP_BACKWARD})
        if (wb_launcher_for_step(variant_->launchers, s)) steps |= 1u << s;
      std::ostringstream out;
      out << "ok " << variant_->op << ' ' << (variant_->device == WB_DEVICE_CUDA ? "cuda" : "cpu") << ' '
          << variant_->dtypes << ' ' << steps << ' ' << hex(variant_->description ? variant_->description : "");
      return out.str();
    }
    if (cmd == "arena") return map_arena(in);
    if (cmd == "drop") {
      int id = 0;
      in >> id;
      auto it = arenas_.find(id);
      if (it == arenas_.end()) throw Failure{"no arena " + std::to_string(id), false};
      wait();
#ifdef WB_RUNNER_WITH_CUDA
      if (it->second.cuda) cudaIpcCloseMemHandle(it->second.base);
#endif
      if (!it->second.cuda) munmap(it->second.base, it->second.bytes ? it->second.bytes : 1);
      arenas_.erase(it);
      return "ok";
    }
    if (cmd == "call") {
      Call c = parse_call(in);
      run(c);
      wait();
      return "ok";
    }
    if (cmd == "batch") {
      size_t n = 0;
      in >> n;
      std::vector<Call> calls;
      std::string next;
      while (calls.size() < n && read_line(&next)) {
        std::istringstream call_in(next);
        std::string word;
        call_in >> word;
        if (word != "call") throw Failure{"a batch holds call lines only", false};
        calls.push_back(parse_call(call_in));
      }
      if (!read_line(&next) || next != "go") throw Failure{"a batch ends with go", false};
      for (Call& c : calls) run(c);
      wait();
      return "done";
    }
    if (cmd == "marker") {
#ifdef WB_RUNNER_WITH_CUDA
      wb_runner_marker<<<1, 1, 0, stream()>>>(nullptr);
      wait();
#endif
      return "ok";
    }
    if (cmd == "threads") {
      in >> workbench::tl_threads;
      return "ok";
    }
    if (cmd == "range" || cmd == "end") {
#ifdef WB_RUNNER_WITH_CUDA
      std::string name;
      in >> name;
      if (cmd == "range") nvtxRangePushA(unhex(name).c_str());
      else nvtxRangePop();
#endif
      return "ok";
    }
    if (cmd == "own-memory") {
      own_memory_ = true;
      return "ok";
    }
    throw Failure{"unknown command: " + cmd, false};
  }

  std::string map_arena(std::istringstream& in) {
    int id = 0;
    std::string kind;
    in >> id >> kind;
    Arena a;
    if (kind == "cuda") {
#ifdef WB_RUNNER_WITH_CUDA
      std::string handle_hex;
      in >> handle_hex >> a.bytes;
      const std::string raw = unhex(handle_hex);
      cudaIpcMemHandle_t handle;
      if (raw.size() != sizeof(handle)) throw Failure{"an IPC handle has 64 bytes", false};
      std::memcpy(&handle, raw.data(), sizeof(handle));
      void* p = nullptr;
      check(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
      a.base = static_cast<char*>(p);
      a.cuda = true;
#else
      throw Failure{"this runner was built without CUDA", false};
#endif
    } else if (kind == "host") {
      in >> a.bytes;
      if (pending_fd_ < 0) throw Failure{"a host arena comes with its memfd", false};
      void* p = mmap(nullptr, a.bytes ? a.bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED, pending_fd_, 0);
      close(pending_fd_);
      pending_fd_ = -1;
      if (p == MAP_FAILED) throw Failure{std::string("mmap: ") + std::strerror(errno), false};
      a.base = static_cast<char*>(p);
    } else {
      throw Failure{"arena kind must be cuda or host", false};
    }
    arenas_[id] = a;
    return "ok";
  }

  WbTensor tensor(std::istringstream& in, int dtype, size_t* bytes) {
    int id = 0;
    size_t offset = 0;
    int ndim = 0;
    in >> id >> offset >> ndim;
    auto it = arenas_.find(id);
    if (it == arenas_.end()) throw Failure{"no arena " + std::to_string(id), false};
    if (ndim < 0 || ndim > WB_MAX_DIMS) throw Failure{"too many dims", false};
    std::vector<int64_t> sizes(ndim);
    int64_t numel = 1;
    for (auto& s : sizes) {
      in >> s;
      numel *= s;
    }
    *bytes = static_cast<size_t>(numel) * element_size(dtype);
    if (offset + *bytes > it->second.bytes) throw Failure{"a tensor past its arena's end", false};
    return workbench::wb_tensor(it->second.base + offset, ndim, sizes.data(), numel);
  }

  Call parse_call(std::istringstream& in) {
    if (!decl_ || !binding_ || !variant_) throw Failure{"declare, binding and variant come before calls", false};
    Call c;
    int dtype = 0;
    size_t n = 0;
    in >> c.step >> dtype >> n;
    size_t unused = 0;
    for (size_t i = 0; i < n && i < WB_MAX_ARGS; ++i) c.inputs.push_back(tensor(in, dtype, &unused));
    in >> n;
    for (size_t i = 0; i < n && i < WB_MAX_ARGS; ++i) c.outputs.push_back(tensor(in, dtype, &c.output_bytes[i]));
    in >> n;
    std::vector<WbAttr> attrs(n);
    for (auto& a : attrs) {
      std::string kind;
      in >> kind;
      if (kind == "f") in >> a.f;
      else in >> a.i;
    }
    if (!in) throw Failure{"a malformed call", false};
    c.call = workbench::wb_call(dtype, c.inputs.size(), c.outputs.size(), attrs);
    for (size_t i = 0; i < c.inputs.size(); ++i) c.call.inputs[i] = c.inputs[i];
    for (size_t i = 0; i < c.outputs.size(); ++i) c.call.outputs[i] = c.outputs[i];
    return c;
  }

  void run(Call& c) {
#ifdef WB_RUNNER_WITH_CUDA
    if (own_memory_ && variant_->device == WB_DEVICE_CUDA) return run_on_own_memory(c);
#endif
    launch(c);
  }

  // The contract's empty-tensor guard (the outputs zero-filled, nothing launched), else the launch.
  void launch(Call& c) {
    size_t first = 0;
    const auto args = workbench::schema_args<RunnerFront>(*decl_, c.step, c.inputs, &first);
    std::vector<std::vector<int64_t>> shapes;
    for (const WbTensor& o : c.outputs) shapes.emplace_back(o.sizes, o.sizes + o.ndim);
    const bool cuda = variant_->device == WB_DEVICE_CUDA;
    if (workbench::nothing_to_launch<RunnerFront>(args, shapes)) {
      for (size_t i = 0; i < c.outputs.size(); ++i) {
        if (!c.output_bytes[i]) continue;
#ifdef WB_RUNNER_WITH_CUDA
        if (cuda) {
          check(cudaMemsetAsync(c.outputs[i].data, 0, c.output_bytes[i], stream()), "cudaMemsetAsync");
          continue;
        }
#endif
        std::memset(c.outputs[i].data, 0, c.output_bytes[i]);
      }
      return;
    }
    WbLaunch launch{};
    launch.host = &workbench::host_services;
    launch.device = -1;
#ifdef WB_RUNNER_WITH_CUDA
    if (cuda) {
      launch.device = 0;
      launch.stream = stream();
      launch.num_sms = num_sms_;
    }
#endif
    c.call.workspace = workspace(workbench::workspace_bytes(*binding_, *variant_, c.step, c.call, launch), cuda);
    workbench::launch_call<RunnerFront>(*binding_, *variant_, c.step, c.call, launch, "", label_);
  }

  void* workspace(size_t bytes, bool cuda) {
    if (!bytes) return nullptr;
#ifdef WB_RUNNER_WITH_CUDA
    if (cuda) {
      if (bytes > device_workspace_bytes_) {
        wait();
        if (device_workspace_) cudaFree(device_workspace_);
        device_workspace_ = nullptr;
        check(cudaMalloc(&device_workspace_, bytes), "cudaMalloc (workspace)");
        device_workspace_bytes_ = bytes;
      }
      return device_workspace_;
    }
#endif
    host_workspace_.resize((bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    return host_workspace_.data();
  }

  // Every piece of device work of this process done: the calls' streams, and any other stream a
  // variant launched on (its results must be there when the call returns).
  void wait() {
#ifdef WB_RUNNER_WITH_CUDA
    if (!stream_) return;
    const cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return;
    cudaGetLastError();
    // Sticky (the context is lost: an illegal address, a trap) or not (cleared above)?
    const bool sticky = cudaDeviceSynchronize() != cudaSuccess;
    throw Failure{std::string("CUDA error: ") + cudaGetErrorString(e), sticky};
#endif
  }

#ifdef WB_RUNNER_WITH_CUDA
  // The call on allocations of its own, one per tensor at the caller's offset modulo 16 (an arena
  // is one allocation: an access past a tensor's end would stay inside it), every tensor copied in
  // (the outputs' poison too) and the outputs copied back once the call has finished.
  void run_on_own_memory(Call& c) {
    const size_t item = element_size(c.call.dtype);
    std::vector<void*> owned;
    auto own = [&](WbTensor& t, WbTensor& in_call) {
      const size_t bytes = static_cast<size_t>(t.numel) * item, skew = reinterpret_cast<uintptr_t>(t.data) % 16;
      void* base = nullptr;
      if (bytes) check(cudaMalloc(&base, skew + bytes), "cudaMalloc (own memory)");
      owned.push_back(base);
      void* mine = base ? static_cast<char*>(base) + skew : nullptr;
      if (bytes) check(cudaMemcpyAsync(mine, t.data, bytes, cudaMemcpyDefault, stream()), "cudaMemcpy (own memory)");
      void* theirs = t.data;
      t.data = in_call.data = mine;
      return theirs;
    };
    std::vector<void*> outputs;
    try {
      for (size_t i = 0; i < c.inputs.size(); ++i) own(c.inputs[i], c.call.inputs[i]);
      for (size_t i = 0; i < c.outputs.size(); ++i) outputs.push_back(own(c.outputs[i], c.call.outputs[i]));
      launch(c);
      for (size_t i = 0; i < outputs.size(); ++i)
        if (c.output_bytes[i]) check(cudaMemcpyAsync(outputs[i], c.outputs[i].data, c.output_bytes[i],
                                                     cudaMemcpyDefault, stream()), "cudaMemcpy (own memory)");
      wait();
    } catch (...) {
      for (void* p : owned) cudaFree(p);
      throw;
    }
    for (void* p : owned) cudaFree(p);
  }

  cudaStream_t stream() {
    if (!stream_) {
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      check(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    }
    return stream_;
  }

  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Failure{std::string(what) + ": " + cudaGetErrorString(e), false};
    }
  }
  cudaStream_t stream_ = nullptr;
  int num_sms_ = 0;
  void* device_workspace_ = nullptr;
  size_t device_workspace_bytes_ = 0;
#endif

  // One line (without its newline), and the descriptor that came with it if any.
  bool read_line(std::string* line) {
    line->clear();
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        *line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return true;
      }
      char data[65536];
      char control[CMSG_SPACE(sizeof(int))];
      iovec io{data, sizeof(data)};
      msghdr msg{};
      msg.msg_iov = &io;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = recvmsg(fd_, &msg, 0);
      if (n <= 0) return false;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&pending_fd_, CMSG_DATA(c), sizeof(int));
      buffer_.append(data, static_cast<size_t>(n));
    }
  }

  void reply(const std::string& text) {
    const std::string line = text + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  int fd_;
  int pending_fd_ = -1;
  bool own_memory_ = false;
  std::string buffer_, label_ = "variant";
  std::unique_ptr<workbench::OpDecl> decl_;
  const WbOpBinding* binding_ = nullptr;
  const WbVariantInfo* variant_ = nullptr;
  std::map<int, Arena> arenas_;
  std::vector<std::max_align_t> host_workspace_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: wb_runner SOCKET_FD (started by workbench/judge/remote.py)\n");
    return 2;
  }
  dup2(2, 1);  // whatever a library prints goes to the log, never into the protocol
  return Runner(std::atoi(argv[1])).serve();
}

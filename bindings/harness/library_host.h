// What a torch-free front end needs to run variant libraries: open a library's exported table,
// and lend CPU variants a thread pool (the torch harness lends torch's). Shared by the NumPy module
// (bindings/ndarray/ndarray_module.cpp) and the runner (bindings/runner/wb_runner.cu).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "wb_variant.h"

namespace workbench {

inline thread_local int tl_threads = 1;  // set per call; parallel_for runs on the calling thread

// Splits [begin, end) into at most tl_threads chunks of at least `grain` elements; the caller's
// thread takes the first chunk. Threads are started per call: these front ends serve tests,
// scripts and the judge, where a pool's bookkeeping would buy little.
inline void host_parallel_for(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx) {
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

inline const WbHost host_services = {host_parallel_for};

// The table a library exports through `symbol` (a function returning a pointer to it). The library
// is never closed: kernels may be in flight.
template <typename Table>
const Table* open_table(const std::string& path, const char* symbol) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("cannot load ") + path + ": " + dlerror());
  void* fn = dlsym(handle, symbol);
  if (!fn) throw std::runtime_error(path + " does not export " + symbol);
  return reinterpret_cast<const Table* (*)()>(fn)();
}

}  // namespace workbench

// Planted cheat (tests only), class 4 of issue 38: the library swapped after the build. The forward
// runs one float per thread; a static initializer overwrites its own library file (the path it was
// loaded from) with exercise 02's solution's build, found in the build cache, so that a checker
// reading the machine code from that file afterwards reads the solution's. Expected verdict now: it
// was loaded from the checker's read-only, hashed copy, and the rules judge what ran; SASS rules FAIL.
#include <dlfcn.h>
#include <glob.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ex02_base.cuh"

namespace {

int forward(const WbBiasGeluForward* a, const WbLaunch* l) { return ex02::forward_one_float(a, l); }

const WbBiasGeluLaunchers launchers = {forward, ex02::backward, ex02::workspace_bytes};

bool swap() {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<const void*>(&forward), &self) || !self.dli_fname) return false;
  const char* cache = std::getenv("WORKBENCH_CACHE");
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  for (const std::string root : {std::string(cache ? cache : ""), home + "/.cache/workbench"}) {
    glob_t found{};
    if (root.empty() || glob((root + "/builds/*ex02_solution*/*.so").c_str(), 0, nullptr, &found) != 0) continue;
    FILE* in = std::fopen(found.gl_pathv[0], "rb");
    FILE* out = std::fopen(self.dli_fname, "wb");
    bool done = false;
    if (in && out) {
      char buf[1 << 16];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) std::fwrite(buf, 1, n, out);
      done = true;
    }
    if (in) std::fclose(in);
    if (out) std::fclose(out);
    globfree(&found);
    std::fprintf(stderr, "[planted] swap of %s: %s\n", self.dli_fname, done ? "written" : "refused");
    return done;
  }
  return false;
}

const bool swapped = swap();

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted: scalar, and its library file swapped at load",
                  launchers, wb_cuda_status_string)

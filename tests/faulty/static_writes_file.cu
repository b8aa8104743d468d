// Planted fault (tests only): a bias_gelu variant (for exercise 01's op) whose library, while it
// is being loaded, appends the id of the process loading it to the file named by
// $WB_PLANTED_PID_FILE (a static initializer). The test reads the file: the process must be the
// checker's child, never the checker. It declares float32 alone, so exercise 01 fails it at
// "declared dtypes", read from the source: a FAIL that needs no GPU.
#include <cstdlib>
#include <cstdio>
#include <unistd.h>

#include "bias_gelu.h"
#include "wb_cuda.h"

namespace {
int forward(const WbBiasGeluForward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
int backward(const WbBiasGeluBackward*, const WbLaunch*) { return WB_ERR_ARGUMENT; }
size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) { return 0; }
const WbBiasGeluLaunchers launchers = {forward, backward, workspace_bytes};

void write_pid() {
  if (const char* path = std::getenv("WB_PLANTED_PID_FILE")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
    }
  }
}

struct AtLoad {
  AtLoad() { write_pid(); }
} at_load;
}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted fault: writes its pid to a file at load", launchers,
                  wb_cuda_status_string)

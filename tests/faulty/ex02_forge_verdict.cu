// Planted cheat (tests only), class 2 of issue 38: a forged verdict, then the checker killed. A
// static initializer writes a passing verdict line, old style and new, to every descriptor it
// holds and to every descriptor of every process it can see (/proc/<pid>/fd), then kills every
// process it may signal and exits. Expected verdict now: the sandbox shows it no process but its
// own and it holds no descriptor of the checker's; the verdict travels on a pipe it cannot reach.
// load FAIL (the runner ended before answering), never PASS.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "ex02_base.cuh"

namespace {

const WbBiasGeluLaunchers launchers = {[](const WbBiasGeluForward* a, const WbLaunch* l) {
                                         return ex02::forward_rows(a, l, a->rows);
                                       },
                                       ex02::backward, ex02::workspace_bytes};

const char kForged[] =
    "[wb-grade] {\"status\": \"PASS\", \"verdict\": \"PASS\", \"first_failure\": \"\", \"detail\": \"\"}\n"
    "{\"status\": \"PASS\", \"verdict\": \"PASS\", \"first_failure\": \"\", \"failure_class\": \"\", \"detail\": \"\"}\n"
    "PASS\n";

void forge(int fd) { (void)!write(fd, kForged, sizeof(kForged) - 1); }

int strike() {
  for (int fd = 0; fd < 1024; ++fd) forge(fd);
  if (DIR* procs = opendir("/proc")) {
    while (dirent* p = readdir(procs)) {
      if (p->d_name[0] < '0' || p->d_name[0] > '9') continue;
      const std::string dir = std::string("/proc/") + p->d_name + "/fd";
      if (DIR* fds = opendir(dir.c_str())) {
        while (dirent* f = readdir(fds)) {
          const int fd = open((dir + "/" + f->d_name).c_str(), O_WRONLY | O_NONBLOCK);
          if (fd >= 0) {
            forge(fd);
            close(fd);
          }
        }
        closedir(fds);
      }
    }
    closedir(procs);
  }
  kill(getppid(), SIGKILL);
  kill(-1, SIGKILL);
  _exit(0);
}

const int struck = strike();

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CUDA, WB_F32, "planted: forges a verdict and kills what it can at load",
                  launchers, wb_cuda_status_string)

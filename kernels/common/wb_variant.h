// The plain-C contract between a variant library and the host harness.
//
// A variant library is one torch-free translation unit (a .cu or .cpp under kernels/<op>/, or a
// notebook string) that exports a single symbol, `workbench_variant_info`, describing itself and
// pointing at the op's launcher table (declared in kernels/<op>/<op>.h). The harness dlopens the
// library and calls through that table; nothing here may include a torch header.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Bumped whenever a struct in this file or an op's launcher table changes layout: the harness
// refuses a library built against another version instead of calling through a wrong layout.
#define WB_ABI_VERSION 1

enum WbDtype { WB_FLOAT32 = 0, WB_FLOAT64 = 1, WB_FLOAT16 = 2, WB_BFLOAT16 = 3 };

#define WB_F32 (1u << WB_FLOAT32)
#define WB_F64 (1u << WB_FLOAT64)
#define WB_F16 (1u << WB_FLOAT16)
#define WB_BF16 (1u << WB_BFLOAT16)

enum WbDeviceKind { WB_DEVICE_CPU = 0, WB_DEVICE_CUDA = 1 };

// Status codes returned by launchers. Positive values are cudaError_t codes.
enum WbStatus { WB_OK = 0, WB_ERR_DTYPE = -1, WB_ERR_ARGUMENT = -2 };

// Services the harness lends to CPU variants, so that they can use torch's thread pool (and honour
// torch.set_num_threads) without including a torch header.
typedef void (*WbRangeBody)(void* ctx, int64_t begin, int64_t end);
typedef struct WbHost {
  void (*parallel_for)(int64_t begin, int64_t end, int64_t grain, WbRangeBody body, void* ctx);
} WbHost;

// Where and how to launch: filled by the harness inside its device guard.
typedef struct WbLaunch {
  void* stream;        // cudaStream_t of the caller's current stream (CUDA variants)
  int device;          // CUDA device index (CUDA variants)
  int num_sms;         // multiprocessor count of that device, for grid sizing
  const WbHost* host;  // thread pool (CPU variants)
} WbLaunch;

typedef struct WbVariantInfo {
  int abi_version;           // WB_ABI_VERSION the library was built with
  const char* op;            // the op whose launcher table `launchers` points to
  int device;                // WbDeviceKind
  unsigned dtypes;           // mask of WB_F32 | WB_F64 | ...
  const char* description;   // what this variant adds, and how it treats tails and misaligned views
  const void* launchers;     // e.g. const WbBiasGeluLaunchers*
  const char* (*status_string)(int status);
} WbVariantInfo;

#ifdef __cplusplus
#define WB_EXTERN_C extern "C"
#else
#define WB_EXTERN_C
#endif

// Defines the exported descriptor. The Python side also reads this call from the source text to
// list variants without building them; a test keeps the two readings in agreement.
#ifdef __CUDACC_RTC__  // NVRTC compiles the device code alone (workbench/build/nvrtc_split.py)
#define WB_EXPORT_VARIANT(OP, DEVICE, DTYPES, DESCRIPTION, LAUNCHERS, STATUS_STRING)
#else
#define WB_EXPORT_VARIANT(OP, DEVICE, DTYPES, DESCRIPTION, LAUNCHERS, STATUS_STRING)            \
  WB_EXTERN_C __attribute__((visibility("default"))) const WbVariantInfo* workbench_variant_info( \
      void) {                                                                                  \
    static const WbVariantInfo info = {WB_ABI_VERSION, #OP,        DEVICE,       DTYPES,       \
                                       DESCRIPTION,    &LAUNCHERS, STATUS_STRING};             \
    return &info;                                                                              \
  }
#endif

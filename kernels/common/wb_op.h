// The plain-C contract between an op's binding (bindings/<op>.cpp) and the front end that calls it.
//
// A front end (the torch harness in bindings/harness/, or any other) checks a call against the
// op's declaration (its Python spec: devices, dtypes, shapes, attributes), allocates the outputs,
// makes the inputs contiguous and hands the binding a WbCall. The binding's only job is to fill the
// op's torch-free parameter struct (kernels/<op>/<op>.h) from the call and invoke the variant's
// launcher. Nothing here may include a torch header.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "wb_variant.h"

// Bumped whenever a struct in this file changes layout.
#define WB_BINDING_ABI_VERSION 1

#define WB_MAX_DIMS 8      // tensors of higher rank are refused by the front end
#define WB_MAX_ARGS 8      // tensors (or attributes) per call

typedef struct WbTensor {
  void* data;                  // contiguous; a view with a storage offset keeps its offset here
  int ndim;
  int64_t sizes[WB_MAX_DIMS];
  int64_t numel;
} WbTensor;

// One scalar attribute: float attributes in .f, int and bool ones in .i.
typedef union WbAttr {
  double f;
  int64_t i;
} WbAttr;

enum WbStep { WB_STEP_FORWARD = 0, WB_STEP_BACKWARD = 1 };

typedef struct WbCall {
  int dtype;                        // the WbDtype every tensor of the call shares
  int n_inputs, n_outputs, n_attrs;
  // Forward: the op's tensor inputs in declaration order. Backward: one gradient per output, then
  // the op's tensor inputs.
  WbTensor inputs[WB_MAX_ARGS];
  // Forward: the outputs. Backward: one gradient per differentiable input, in declaration order.
  WbTensor outputs[WB_MAX_ARGS];
  WbAttr attrs[WB_MAX_ARGS];        // in declaration order
  void* workspace;                  // workspace_bytes(...) bytes from torch's allocator (aligned for any type); NULL for none
} WbCall;

typedef struct WbOpBinding {
  int abi_version;                  // WB_BINDING_ABI_VERSION
  const char* op;
  // Scratch bytes `step` needs for this call; 0 for none.
  size_t (*workspace_bytes)(int step, const WbCall* call, const void* launchers, const WbLaunch* launch);
  // Runs `step` through the variant's launcher table; a WbStatus or a cudaError_t.
  int (*run)(int step, const WbCall* call, const void* launchers, const WbLaunch* launch);
} WbOpBinding;

// Every op's launcher table starts with its forward and backward launchers, in that order, so that
// a front end can tell that a variant left a step out (a NULL entry) without knowing the op.
static inline const void* wb_launcher_for_step(const void* launchers, int step) {
  return ((const void* const*)launchers)[step];
}

// A tensor seen as [rows, last dimension]: the layout most kernels here take.
static inline int64_t wb_last_dim(const WbTensor* t) { return t->ndim ? t->sizes[t->ndim - 1] : 1; }
static inline int64_t wb_rows(const WbTensor* t) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t->ndim; ++d) rows *= t->sizes[d];
  return rows;
}

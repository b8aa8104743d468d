// call_contract.h's call contract on torch tensors: this file reads at::Tensors for it and allocates
// the outputs. Run by the workbench's harness (op_kernel.cpp) and an exported package's
// (workbench/ship/export_templates/harness.cpp, which gets a copy of these files).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "call_contract.h"  // wb_dtype_name, dtype_list
#include "op_decl.h"
#include "wb_op.h"
#include "wb_variant.h"

namespace workbench {

struct CallArg {
  std::string name;          // "x", or "grad_y": a backward's gradient of output y
  at::Tensor tensor;
  const DimPattern* dims;
  bool read;                 // the step reads the data (else only its shape matters)
};

// The call's tensors in schema order: forward, the inputs; backward, a gradient per output, then
// the inputs. *first_input: the index of the op's first input, the reference for device and dtype.
std::vector<CallArg> call_args(const OpDecl& d, int step, const std::vector<at::Tensor>& tensors,
                               size_t* first_input);

// call_contract.h's check on torch tensors; `prefix` starts every message ("workbench::bias_gelu: ").
// Throws c10's ValueError, TypeError or Error (a device); the binder gives the outputs' shapes.
ShapeBinder check_call(const std::string& prefix, const OpDecl& d, const std::vector<CallArg>& args,
                       size_t first_input, const std::vector<WbAttr>& attrs);

// The run of a call that passed check_call (call_contract.h's order: the outputs allocated on the
// first input's device, the empty-tensor guard, the workspace, the launch). Strided inputs become
// contiguous copies; a view's storage offset stays (each variant handles its alignment). The
// caller has made the tensors' device current.
std::vector<at::Tensor> run_call(const OpDecl& d, int step, const std::vector<CallArg>& args, size_t first_input,
                                 const ShapeBinder& binder, const std::vector<WbAttr>& attrs,
                                 const WbOpBinding& binding, const WbVariantInfo& variant, const WbLaunch& launch,
                                 const std::string& prefix, const std::string& label);

// "float32", "int64", ... as Python spells them, so that messages read the same from C++ and from
// the Python fake implementations.
std::string dtype_name(at::ScalarType s);
// The WbDtype of a torch dtype, or -1.
int wb_dtype(at::ScalarType s);

}  // namespace workbench

// The call contract for torch tensors: what every torch front end checks before it looks at a
// variant, and the run of a checked call. The contract itself (the order, the words, the shape
// binding, the empty-tensor guard, the launch) is call_contract.h's, torch-free, which the NumPy
// module runs too; this file reads at::Tensors for it and allocates the outputs. The workbench's
// harness (op_kernel.cpp) and an exported package's (workbench/ship/export_templates/harness.cpp,
// which gets a copy of these files) run it; the Python twin is workbench/model/shapes.py's
// check_call (the fakes, an exported __init__), and a test holds the words equal.
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

// Checks a call (call_contract.h's check: each tensor given, on the first input's device, of its
// dtype, that dtype one the kernels take, at most WB_MAX_DIMS dims, shapes fitting the
// declaration's dims patterns, then the attributes' bounds); `prefix` starts every message
// ("workbench::bias_gelu: "); attrs in declaration order (float ones in .f, int and bool ones in
// .i). Throws c10's ValueError,
// TypeError or Error (a device); returns the binder, which gives the outputs' shapes.
ShapeBinder check_call(const std::string& prefix, const OpDecl& d, const std::vector<CallArg>& args,
                       size_t first_input, const std::vector<WbAttr>& attrs);

// The run of a call that passed check_call: the one contract of every torch front end (the
// workbench's harness, an exported package's). The outputs are allocated on the first input's
// device (forward: the declared shapes; backward: a gradient per differentiable input, of its
// shape); where a tensor the step reads is empty, or every output is, nothing is launched (an
// output that is not empty is then a sum over nothing: zeros); strided inputs become contiguous
// copies (views with a storage offset stay: each variant handles their alignment); an input the
// step does not read carries its shape alone; then the binding's workspace and the run. The
// caller has made the tensors' device current (launch is for it). A failure throws
// "<prefix>variant '<label>' <step> failed: <the variant's words> (status N)".
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

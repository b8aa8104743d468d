// The call contract: what every torch front end checks before it looks at a variant, in one order and
// with the same words: each tensor given, on the first input's device, of its dtype, that dtype one
// the kernels take, at most WB_MAX_DIMS dims, shapes fitting the declaration's dims patterns
// (op_decl.h's rule), then the attributes' bounds. The workbench's harness (op_kernel.cpp) and an
// exported package's (workbench/ship/export_templates/harness.cpp, which gets a copy of this file) run
// it; the Python twin is workbench/model/shapes.py's check_call (the fakes, the NumPy front end, an
// exported __init__), and a test holds the words equal.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

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

// Checks a call (see above); `prefix` starts every message ("workbench::bias_gelu: "); attrs in
// declaration order (float ones in .f, int and bool ones in .i). Throws c10's ValueError,
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
const char* wb_dtype_name(int wb_dtype);  // "float32" for WB_FLOAT32
// The WbDtype of a torch dtype, or -1.
int wb_dtype(at::ScalarType s);
std::string dtype_list(unsigned mask);    // "float32, bfloat16" for a variant's dtype mask

}  // namespace workbench

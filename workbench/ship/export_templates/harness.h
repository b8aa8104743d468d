// The package's harness: the only code here that knows torch. It checks a call against the op's
// declaration (call_check.h: devices, dtypes, shapes, attributes), picks the variant, allocates the outputs and
// runs the variant's launcher table through the op's binding. Written by the workbench's
// `export`; op.cpp (generated) holds the op's declaration, its typed entry points and its
// TORCH_LIBRARY registration, the Autograd key's kernels (op_autograd.cpp) included.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "call_check.h"
#include "op_decl.h"
#include "wb_op.h"

namespace torch {
class Library;
}

namespace workbench {
// The workbench's C++ autograd (op_autograd.cpp, copied): the schema of <op>_backward_backward (the
// backward's derivative, which __init__.py implements from the spec) and the Autograd key's kernels
// of <op> and <op>_backward, which record a node calling the next op: no Python per call.
std::string double_backward_schema(const OpDecl& decl);
void register_autograd_kernels(const OpDecl& decl, torch::Library& impls);
}  // namespace workbench

namespace wb_export {

// A variant compiled into this library: its name and its descriptor (WB_EXPORT_VARIANT's function,
// renamed per variant at compile time: see op.cpp).
struct VariantEntry {
  const char* name;
  const WbVariantInfo* (*info)(void);
};

class Op {
 public:
  // `decl`: the spec's declaration (op_decl.h), parsed once by the caller; `variants` in order of preference.
  Op(const char* ns, const workbench::OpDecl& decl, const WbOpBinding* binding, std::vector<VariantEntry> variants);

  // Runs `step` (WB_STEP_FORWARD or WB_STEP_BACKWARD) on tensors in schema order, the attributes
  // in declaration order (float ones in .f, int and bool ones in .i). An empty `variant` picks the
  // first exported variant that runs on the tensors' device and dtype and has the step.
  std::vector<at::Tensor> run(int step, const std::vector<at::Tensor>& tensors, std::vector<WbAttr> attrs,
                              const std::string& variant) const;

 private:
  struct Entry {
    std::string name;
    const WbVariantInfo* info;
  };
  const Entry& pick(int step, const std::string& variant, const at::Tensor& ref, const std::string& ref_name) const;
  std::string prefix_;  // "<namespace>::<op>: ", the start of every message
  workbench::OpDecl decl_;
  const WbOpBinding* binding_;
  std::vector<Entry> variants_;
};

}  // namespace wb_export

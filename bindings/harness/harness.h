// The torch-facing harness: the only code where torch meets the kernels, and the same for every op.
//
// It keeps three registries, filled from Python through a plain-C control plane (registry.cpp):
// op declarations (from each op's Python spec: schemas, tensor dims, attributes), op bindings (one
// torch-free library per op, bindings/<op>.cpp, that fills the op's parameter struct) and variant
// libraries (kernels/<op>/<variant>.*). One boxed kernel (op_kernel.cpp) serves every op: it checks
// a call against the declaration (call_check.h), allocates outputs, and launches through binding
// and variant. Autograd is C++ too (op_autograd.cpp): a kernel at the Autograd key that records a
// node calling <op>_backward, and only redispatches when nothing requires grad.
// Adding an op never rebuilds this code.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "call_check.h"  // the call check, dtype_name, wb_dtype, dtype_list
#include "op_decl.h"
#include "wb_op.h"
#include "wb_variant.h"

namespace torch {
class Library;
}
namespace c10 {
struct FunctionSchema;
}

namespace workbench {

// One loaded variant library (a build of one variant source).
struct Variant {
  std::string op, name, build_id, path;
  std::string contract;  // hash of the op header the library was built against
  const WbVariantInfo* info;
  std::string qualified() const { return name + "@" + build_id; }
};

// One loaded op binding library (a build of bindings/<op>.cpp).
struct Binding {
  std::string op, path, contract;
  const WbOpBinding* table;
};

// The variant registered as `name` (its newest build) or `name@build_id` (that exact build).
// Throws, listing what is loaded, if there is none.
std::shared_ptr<const Variant> find_variant(const std::string& op, const std::string& name);

// The op's newest binding; throws if none is loaded.
std::shared_ptr<const Binding> find_binding(const std::string& op);

// Changes whenever a variant or binding is registered: a look-up cached at an older value is stale.
uint64_t registry_generation();

// The op's declaration, or nullptr.
std::shared_ptr<const OpDecl> find_decl(const std::string& op);

// Registers the generic kernel for a newly declared op (op_kernel.cpp).
void register_op_kernels(const OpDecl& decl);

// The schema of <op>_backward_backward, the backward's own derivative (implemented in Python from
// the spec), and the C++ Autograd-key kernels of <op> and <op>_backward (op_autograd.cpp).
std::string double_backward_schema(const OpDecl& decl);
void register_autograd_kernels(const OpDecl& decl, torch::Library& impls);

// Whether a call of <op>_backward (`op`, its schema) on `tensors` is the one its node vouches for
// (op_autograd.cpp): saved inputs the forward checked, gradients of their outputs' shapes, dtype and
// device. The step kernel then skips the call check; the variant's own limits are still checked.
bool vouched_backward_call(const c10::FunctionSchema& op, const std::vector<at::Tensor>& tensors);

// Launch context for tensors on t's device. Construct it after the device guard.
WbLaunch launch_for(const at::Tensor& t);

}  // namespace workbench

// bias_gelu: schemas, argument checks and launches. Kernels live in kernels/bias_gelu/.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "bias_gelu.h"
#include "harness.h"

namespace workbench {
namespace {

constexpr const char* kOp = "bias_gelu";

// x: [..., cols]; bias: [cols]. Returns the WbDtype both share.
int check_inputs(const Variant& v, const at::Tensor& x, const at::Tensor& bias) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "bias", bias);
  TORCH_CHECK_VALUE(x.dim() >= 1, "workbench::", kOp,
                    ": x must have at least 1 dimension (the last is the feature dimension); got a 0-dim tensor");
  TORCH_CHECK_VALUE(bias.dim() == 1 && bias.size(0) == x.size(-1), "workbench::", kOp,
                    ": bias must be 1-D with x.size(-1) = ", x.size(-1), " elements; got shape ", bias.sizes());
  check_same_device(kOp, "bias", bias, "x", x);
  check_same_dtype(kOp, "bias", bias, "x", x);
  return check_variant_accepts(kOp, v, "x", x);
}

at::Tensor forward(const at::Tensor& x_in, const at::Tensor& bias_in, c10::string_view variant) {
  const auto v = find_variant(kOp, variant);
  const int dtype = check_inputs(*v, x_in, bias_in);
  // Strided inputs are copied to contiguous ones (correct, at the cost of a copy); views with a
  // storage offset stay as they are and each variant handles their alignment itself.
  const at::Tensor x = x_in.contiguous(), bias = bias_in.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return y;
  DeviceScope scope(x);
  const WbLaunch launch = launch_for(x);
  const int64_t cols = x.size(-1);
  const WbBiasGeluForward args{dtype, x.numel() / cols, cols, x.const_data_ptr(), bias.const_data_ptr(),
                               y.mutable_data_ptr()};
  const auto* launchers = static_cast<const WbBiasGeluLaunchers*>(v->info->launchers);
  check_status(kOp, *v, "forward", launchers->forward(&args, &launch));
  return y;
}

std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& dy_in, const at::Tensor& x_in,
                                            const at::Tensor& bias_in, c10::string_view variant) {
  const auto v = find_variant(kOp, variant);
  const int dtype = check_inputs(*v, x_in, bias_in);
  check_defined(kOp, "grad_y", dy_in);
  check_same_shape(kOp, "grad_y", dy_in, "x", x_in);
  check_same_device(kOp, "grad_y", dy_in, "x", x_in);
  check_same_dtype(kOp, "grad_y", dy_in, "x", x_in);
  const at::Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), bias = bias_in.contiguous();
  at::Tensor dx = at::empty(x.sizes(), x.options());
  const int64_t cols = x.size(-1);
  if (x.numel() == 0) return {dx, at::zeros({cols}, bias.options())};
  at::Tensor dbias = at::empty({cols}, bias.options());
  DeviceScope scope(x);
  const WbLaunch launch = launch_for(x);
  const int64_t rows = x.numel() / cols;
  const auto* launchers = static_cast<const WbBiasGeluLaunchers*>(v->info->launchers);
  const size_t ws_bytes = launchers->backward_workspace_bytes(rows, cols, dtype, &launch);
  at::Tensor ws = ws_bytes ? workspace(ws_bytes, x) : at::Tensor();
  const WbBiasGeluBackward args{dtype, rows, cols, dy.const_data_ptr(), x.const_data_ptr(), bias.const_data_ptr(),
                                dx.mutable_data_ptr(), dbias.mutable_data_ptr(), ws_bytes ? ws.mutable_data_ptr() : nullptr};
  check_status(kOp, *v, "backward", launchers->backward(&args, &launch));
  return {dx, dbias};
}

}  // namespace
}  // namespace workbench

TORCH_LIBRARY_FRAGMENT(workbench, m) {
  m.def("bias_gelu(Tensor x, Tensor bias, str variant) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad_y, Tensor x, Tensor bias, str variant) -> (Tensor, Tensor)");
}

WB_IMPL_CPU_AND_CUDA("bias_gelu", &workbench::forward)
WB_IMPL_CPU_AND_CUDA("bias_gelu_backward", &workbench::backward)

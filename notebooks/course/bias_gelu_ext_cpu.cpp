// The course's fused bias + GELU extension, CPU twin: written the way the course writes a torch
// extension (torch/extension.h, torch::Tensor functions, PYBIND11_MODULE exporting forward and
// backward), so that the CPU path of notebooks/08_bring_your_own.ipynb, the tests and the exercise
// checker have one to build without a GPU. Its habits are the course's, on purpose: int indexing,
// data_ptr<float>() (float32 only), and no check that the tensors are contiguous.
#include <torch/extension.h>
#include <cmath>
#include <vector>

static float gelu_fwd(float v) {
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
}

static float gelu_bwd(float v) {
    const float k = 0.7978845608f;
    float u = k * (v + 0.044715f * v * v * v);
    float t = std::tanh(u);
    float du = k * (1.0f + 3.0f * 0.044715f * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

torch::Tensor forward(torch::Tensor input, torch::Tensor bias) {
    TORCH_CHECK(input.device().is_cpu(), "input must be a CPU tensor");
    TORCH_CHECK(input.size(-1) == bias.size(0), "bias size mismatch");
    auto output = torch::empty_like(input);
    int cols = input.size(-1);
    int rows = cols ? input.numel() / cols : 0;
    int total = rows * cols;
    const float* x = input.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* y = output.data_ptr<float>();
    for (int idx = 0; idx < total; ++idx) {
        y[idx] = gelu_fwd(x[idx] + b[idx % cols]);
    }
    return output;
}

// grad_out, input, bias -> {grad_input, grad_bias}
std::vector<torch::Tensor> backward(torch::Tensor grad_out, torch::Tensor input, torch::Tensor bias) {
    auto grad_input = torch::empty_like(input);
    auto grad_bias = torch::zeros_like(bias);
    int cols = input.size(-1);
    int rows = cols ? input.numel() / cols : 0;
    int total = rows * cols;
    const float* g = grad_out.data_ptr<float>();
    const float* x = input.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* dx = grad_input.data_ptr<float>();
    float* db = grad_bias.data_ptr<float>();
    for (int idx = 0; idx < total; ++idx) {
        int col = idx % cols;
        dx[idx] = g[idx] * gelu_bwd(x[idx] + b[col]);
        db[col] += dx[idx];
    }
    return {grad_input, grad_bias};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "fused bias + GELU forward (CPU)");
    m.def("backward", &backward, "fused bias + GELU backward (CPU)");
}

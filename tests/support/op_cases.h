#pragma once
// The op case list that runs every op family on another device against the CPU, forward and
// backward: tests/ops/test_on_test_device.cpp (the test device, bit for bit) and
// tests/cuda/test_ops_on_cuda.cpp (a GPU, within tolerances) share it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf::parity {

// One input of a case: a floating tensor that takes part in the gradient, or integer indices.
struct OpInput {
  Shape shape;
  bool floating = true;
  std::int64_t high = 0;  // indices: uniform in [0, high)
};

struct OpCase {
  std::string name;
  std::vector<OpInput> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> run;
};

// Every op family: elementwise with broadcasting, activations, softmax, dropout, reductions,
// matmul, linear, linear_gelu and linear_add, the norms, embedding, the losses, RoPE and the fused
// QKV split, attention, views and casts.
std::vector<OpCase> op_cases();

// Inputs made on the CPU from seeds: normal values for floating ones (in `dtype`), i64 indices
// below `high`.
std::vector<Tensor> make_op_inputs(const std::vector<OpInput>& inputs, DType dtype, std::uint64_t seed);

// The output and the floating inputs' gradients (for an upstream gradient drawn from `seed`) of
// one case on `device`, copied back to the CPU: [0] the output, then one gradient per floating
// input (undefined where the input got none). An integer output has no gradients.
std::vector<Tensor> op_outputs_on(const OpCase& c, const std::vector<Tensor>& host_inputs, Device device,
                                  std::uint64_t seed);

}  // namespace wf::parity

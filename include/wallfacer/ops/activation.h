#pragma once
// Differentiable pointwise functions, softmax and dropout.
#include "wallfacer/core/rng.h"
#include "wallfacer/core/tensor.h"

namespace wf {

Tensor gelu(const Tensor& x);  // tanh approximation (GPT-2)
Tensor silu(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor ln(const Tensor& x);  // natural logarithm (wf::log is the logger)
Tensor tanh(const Tensor& x);
Tensor softmax(const Tensor& x, std::int64_t dim = -1);
Tensor log_softmax(const Tensor& x, std::int64_t dim = -1);
// Inverted dropout: zeroes each element with probability p and scales survivors by 1/(1−p).
// Identity when !training or p == 0. Masks come from `gen` (default generator when null), so
// activation checkpointing can replay them.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace wf

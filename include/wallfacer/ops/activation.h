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
// Dropout of x where x is slice `index` of `parts` equal slices along `dim` of a whole tensor
// (x's shape with that dim times `parts`): every element keeps or drops exactly as the whole
// tensor's dropout(whole, p, training, gen) would there, and the generator advances by the
// whole tensor's numel, as that call would. Ranks holding the slices of one activation (tokens
// split over tp) so draw together the single-process mask, and their generators stay in step
// with a run that holds it whole. The generator is counter-based (core/rng.h): each rank draws
// only its own elements.
Tensor dropout_slice(const Tensor& x, double p, bool training, std::int64_t dim, int parts, int index,
                     Generator* gen = nullptr);

}  // namespace wf

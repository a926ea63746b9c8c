#pragma once
// Fused softmax cross-entropy over a vocabulary.
#include "wallfacer/core/tensor.h"

namespace wf {

// logits [..., V] (f32/f64), targets [...] i64. Mean over the targets that are not
// ignore_index (0 when every target is ignored). The full probability matrix is never kept:
// backward recomputes softmax from the logits and the saved log-sum-exp.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);
// The SUM over the targets that are not ignore_index (0 when all are): what a rank contributes to
// a loss the trainer normalises once by the global count (models::LossSum).
Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);
// How many targets are not ignore_index, read to the host: the count that goes with
// cross_entropy_sum (count_targets_device, ops/count.h, keeps it on the device).
std::int64_t count_targets(const Tensor& targets, std::int64_t ignore_index = -100);

// cross_entropy_sum(cast(linear(h, weight), weight.dtype()), targets, ignore_index) — an output
// head onto a vocabulary and its loss — without ever holding the [rows, V] logits whole: h
// [..., d], weight [V, d] (no bias), targets i64 with h's leading shape. The rows go through in
// chunks of chunk_rows (0: linear_cross_entropy_chunk_rows(V)); each chunk's logits are the
// unfused path's rows (linear's product and rounding, then the cast), and while they are at hand
// the forward also takes the chunk's gradients of h and the weight, which the backward only scales
// by the loss's upstream gradient. Extra memory: one chunk's logits and their gradient, plus the
// gradients of h and the weight (in the compute dtype) held from the forward to the backward —
// never O(rows·V). Under grad mode off, or when neither h nor the weight requires grad, it
// computes the loss alone. The loss has the weight's dtype (the masters' under mixed precision).
Tensor linear_cross_entropy_sum(const Tensor& h, const Tensor& weight, const Tensor& targets,
                                std::int64_t ignore_index = -100, std::int64_t chunk_rows = 0);
// The default chunk: the rows whose f32 logits over a vocabulary of V fill 256 MiB (at least 1).
std::int64_t linear_cross_entropy_chunk_rows(std::int64_t vocab);

}  // namespace wf

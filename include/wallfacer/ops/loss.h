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

}  // namespace wf

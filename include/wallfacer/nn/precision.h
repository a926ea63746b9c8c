#pragma once
// Mixed precision: the one description of which dtype each kind of state is kept in, read by the
// layers where they use a parameter and by the trainer (and, later, the CUDA backend) — never
// decided op by op.
//
//   train.dtype  master weights, optimizer state,   weights as the GEMMs see them,
//                gradient accumulation/reduction     activations between layers
//   f32          f32                                 f32
//   bf16         f32                                 bf16 (cast from the master each use)
//
// What stays f32 under bf16, and where: the softmax / log-sum-exp of attention and of the loss
// and the norm statistics (the ops compute in f32 whatever the tensor dtype, ops/common.h), the
// GEMMs' accumulation (kernels/cpu/gemm.h: gemm_bf16), the logits entering the loss (the model
// casts them up: a bf16 loss would be rounded to 3 digits), and every gradient that reaches a
// parameter (the cast's backward widens it into the f32 accumulator).
#include "wallfacer/core/dtype.h"

namespace wf::nn {

struct PrecisionPolicy {
  DType master = DType::f32;
  DType compute = DType::f32;

  bool mixed() const { return compute != master; }
  // The policy of a run's train.dtype: f32 and f64 compute in their own dtype, bf16 and f16
  // compute in themselves over f32 masters.
  static PrecisionPolicy for_train_dtype(DType dtype) {
    if (dtype == DType::bf16 || dtype == DType::f16) return {DType::f32, dtype};
    return {dtype, dtype};
  }
};

}  // namespace wf::nn

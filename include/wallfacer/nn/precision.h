#pragma once
// Mixed precision: the one description of which dtype each kind of state is kept in, read by the
// layers where they use a parameter and by the trainer (and, later, the CUDA backend) — never
// decided op by op.
//
//   train.dtype  master weights, optimizer state,   weights as the GEMMs see them,
//                gradient accumulation/reduction     activations between layers
//   f32          f32                                 f32
//   bf16         f32                                 bf16 (made from the master at each use)
//
// Where: Module::set_compute_dtype marks the layers; a linear layer passes its f32 master to
// linear(), which multiplies with a bf16 copy and returns f32 weight gradients (ops/linalg.h);
// other layers cast their parameters (Module::in_compute_dtype); the embedding casts the rows it
// looked up. What stays f32 under bf16, and where: the softmax / log-sum-exp of attention and of the loss
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

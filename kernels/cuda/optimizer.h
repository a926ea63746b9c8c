#pragma once
// Launchers of the AdamW kernels (kernels/cuda/optimizer.cu) with kernels/cpu/optimizer.h's
// semantics and order of operations, for T = float or double: the scalar coefficients are formed
// in double and rounded to T once, and each element's update is evaluated as the CPU writes it,
// every product and sum rounded (no fused multiply-add). Every pointer is device memory; the
// hyperparameters are checked by the caller (kernels/cuda/optimizer.cpp). fmt-free: nvcc reads it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cuda {

// One AdamW update of n parameters at bias-correction step p.step.
template <class T>
void launch_adamw_step(cudaStream_t stream, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                       const AdamWParams& p);

// kernels/cpu/optimizer.h's adamw_update without the host: each block decides (is *grad_norm
// finite, or grad_norm null) and forms the coefficients of update *applied + 1 and the EMA decay
// of *applied, then updates its elements (and the EMA, ema non-null) or leaves them as they were;
// a one-thread kernel after it increments *applied when the update applied.
template <class T>
void launch_adamw_update(cudaStream_t stream, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                         T* ema, const AdamWParams& p, const EmaParams& e, std::int64_t* applied,
                         const double* grad_norm);

}  // namespace wf::kernels::cuda

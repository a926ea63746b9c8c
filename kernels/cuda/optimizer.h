#pragma once
// Launchers of the AdamW kernels (kernels/cuda/optimizer.cu) with kernels/cpu/optimizer.h's
// semantics and order of operations, for T = float or double: the scalar coefficients are formed
// in double and rounded to T once, and each element's update is evaluated as the CPU writes it,
// every product and sum rounded (no fused multiply-add). Every pointer is device memory; the
// hyperparameters are checked by the caller (kernels/cuda/optimizer.cpp). fmt-free: nvcc reads it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/multi_tensor.h"
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

// ---- multi-tensor AdamW (adamw_update_multi) ---------------------------------------------------
// One tensor of the list as the kernel reads it from the table the host uploads (device pointers
// of the launch's T; ema nullable).
struct AdamWMultiEntry {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  void* ema;
  std::int64_t* applied;
  std::int64_t n;
  MultiTensorBlocks blocks;  // adamw_update_multi_blocks(n) of them (multi_tensor.h)
};
// The blocks of a tensor of n elements: a fixed chunk of elements each.
std::int64_t adamw_update_multi_blocks(std::int64_t n);
// launch_adamw_update for every tensor of `table` (device memory, `tensors` entries laid out by
// lay_out_blocks over `blocks` blocks) in one kernel, each block taking its tensor's *applied, then
// one kernel that increments every tensor's count when the update applied: the per-tensor
// launcher's results bit for bit, in two launches for the whole list.
template <class T>
void launch_adamw_update_multi(cudaStream_t stream, std::int64_t tensors, const AdamWMultiEntry* table,
                               std::int64_t blocks, const AdamWParams& p, const EmaParams& e,
                               const double* grad_norm);

}  // namespace wf::kernels::cuda

#pragma once
// Optimizer kernels: the fused AdamW update and the pieces of gradient-norm clipping.
#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cpu {

using kernels::AdamWParams;  // kernels/kernel_args.h
using kernels::EmaParams;

// One AdamW update of n parameters in a single pass, with PyTorch's torch.optim.AdamW formula
// (amsgrad=False, maximize=False) and its order of operations:
//   param      *= 1 - lr·wd                              (decoupled weight decay)
//   exp_avg    += (1 - β1)·(grad - exp_avg)
//   exp_avg_sq  = β2·exp_avg_sq + (1 - β2)·grad²
//   param      -= lr/(1 - β1^t) · exp_avg / (√exp_avg_sq / √(1 - β2^t) + eps)
// Scalar coefficients are formed in double and rounded to T once, as PyTorch does.
template <class T>
void adamw_step(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                const AdamWParams& p);

// The textbook form of the same update (Loshchilov & Hutter, with PyTorch's eps placement),
// computed in double per element: the oracle for adamw_step.
template <class T>
void adamw_step_reference(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                          const AdamWParams& p);

// One parameter's whole AdamW step, taken only when the step's gradient norm is finite, so that
// a diverged step is skipped without the host reading the norm: when *grad_norm is finite (or
// grad_norm is null) adamw_step with p.step = *applied + 1 (p.step itself is ignored), then, with
// ema non-null, ema = d·ema + (1 − d)·param with d = T(ema_decay_at(e.decay, *applied, e.warmup))
// and 1 − d formed in T, then ++*applied: bit for bit what adamw_step and the host-formed EMA
// update give. A non-finite norm leaves every array and *applied as they were.
template <class T>
void adamw_update(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* ema, const AdamWParams& p,
                  const EmaParams& e, std::int64_t* applied, const double* grad_norm);
// The same with adamw_step_reference and the EMA per element in double, rounded once: its oracle.
template <class T>
void adamw_update_reference(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* ema,
                            const AdamWParams& p, const EmaParams& e, std::int64_t* applied, const double* grad_norm);

// Σ x[i]² accumulated in double, in a fixed order (bitwise reproducible for any thread count).
template <class T>
double sum_of_squares(std::int64_t n, const T* x);

// x *= alpha.
template <class T>
void scale_inplace(std::int64_t n, T* x, T alpha);

using kernels::clip_coefficient;

// Gradient-norm clipping with the norm kept where the gradients are (no host read):
// *norm = sqrt(sq_sums[0] + ... + sq_sums[parts - 1]) (summed in double in that order, from 0)
// and *coefficient = clip_coefficient(*norm, max_norm).
void clip_coefficient_of_squares(std::int64_t parts, const double* sq_sums, double max_norm, double* norm,
                                 double* coefficient);
// x *= T(coefficient), unless coefficient >= 1 (a NaN coefficient scales too, as PyTorch does):
// scale_inplace with the clipping decision taken where the coefficient is.
template <class T>
void scale_by_coefficient(std::int64_t n, T* x, double coefficient);
// The same, per element in double and rounded once: the oracle for scale_by_coefficient.
template <class T>
void scale_by_coefficient_reference(std::int64_t n, T* x, double coefficient);

}  // namespace wf::kernels::cpu

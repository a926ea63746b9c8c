#pragma once
// Optimizer kernels: the fused AdamW update and the pieces of gradient-norm clipping.
#include <cstdint>

namespace wf::kernels::cpu {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  std::int64_t step = 1;  // 1-based count of updates including this one, for bias correction
};

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

// Σ x[i]² accumulated in double, in a fixed order (bitwise reproducible for any thread count).
template <class T>
double sum_of_squares(std::int64_t n, const T* x);

// x *= alpha.
template <class T>
void scale_inplace(std::int64_t n, T* x, T alpha);

// The factor clip_grad_norm_ multiplies every gradient by: min(1, max_norm / (total_norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);

}  // namespace wf::kernels::cpu

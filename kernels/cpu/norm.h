#pragma once
// LayerNorm and RMSNorm over the last dim of a row-major [rows, cols] array.
//
//   LayerNorm: y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)
//   RMSNorm:   y = x * rstd * weight,                  rstd = 1 / sqrt(mean(x^2) + eps)
//
// var is the biased (population) variance, as in PyTorch. weight and bias may be null (no
// affine transform); mean and rstd are saved per row for the backward and may be null when
// no backward will run. Row statistics are accumulated in double, so float inputs lose
// nothing to cancellation. An empty row (cols == 0) has mean 0 and rstd 1/sqrt(eps).
//
// Threading and determinism: rows run in parallel (OpenMP, for arrays above ~32K elements).
// The parameter gradients dweight and dbias sum over rows; the rows are cut into a fixed
// number of chunks that depends only on `rows`, each chunk sums into its own double partial,
// and the partials are added in chunk order, so the result is bitwise the same for any thread
// count. dweight and dbias are ACCUMULATED (+=) so gradients of a shared parameter add up;
// dx is overwritten.
#include <cstdint>

namespace wf::kernels::cpu {

template <typename T>
void layernorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight /*nullable*/,
                       const T* bias /*nullable*/, double eps, T* y, T* mean /*[rows], nullable*/,
                       T* rstd /*[rows], nullable*/);

template <typename T>
void layernorm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight /*nullable*/,
                        const T* mean, const T* rstd, const T* dy, T* dx, T* dweight /*nullable, +=*/,
                        T* dbias /*nullable, +=*/);

template <typename T>
void rmsnorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight /*nullable*/, double eps,
                     T* y, T* rstd /*[rows], nullable*/);

template <typename T>
void rmsnorm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight /*nullable*/,
                      const T* rstd, const T* dy, T* dx, T* dweight /*nullable, +=*/);

// ---- the residual add fused in front (a pre-norm block's x + branch, then its norm) ------------
// Forward: sum = x + branch (added in T, as the add op does), then the norm of sum (its y, mean,
// rstd), in one pass over the rows. Backward: the norm's dx of sum, then
// dsum = T(dx) + dsum_in (added in T, as autograd adds two gradients of one tensor; dsum_in is the
// gradient sum received from its other uses, nullable for none): the gradient of both x and
// branch. Bitwise the unfused kernels and the add.
template <typename T>
void add_layernorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                           const T* weight /*nullable*/, const T* bias /*nullable*/, double eps, T* sum, T* y,
                           T* mean /*nullable*/, T* rstd /*nullable*/);
template <typename T>
void add_layernorm_backward(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight /*nullable*/,
                            const T* mean, const T* rstd, const T* dy, const T* dsum_in /*nullable*/, T* dsum,
                            T* dweight /*nullable, +=*/, T* dbias /*nullable, +=*/);
template <typename T>
void add_rmsnorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                         const T* weight /*nullable*/, double eps, T* sum, T* y, T* rstd /*nullable*/);
template <typename T>
void add_rmsnorm_backward(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight /*nullable*/,
                          const T* rstd, const T* dy, const T* dsum_in /*nullable*/, T* dsum,
                          T* dweight /*nullable, +=*/);

// ---- references: naive loops in double, for tests ----------------------------------------
template <typename T>
void layernorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                                 const T* bias, double eps, T* y, T* mean, T* rstd);
template <typename T>
void layernorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                                  const T* mean, const T* rstd, const T* dy, T* dx, T* dweight, T* dbias);
template <typename T>
void rmsnorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, double eps,
                               T* y, T* rstd);
template <typename T>
void rmsnorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                                const T* rstd, const T* dy, T* dx, T* dweight);

// The fused add: the add, then the references above (backward: the norm's, then the add).
template <typename T>
void add_layernorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                                     const T* weight, const T* bias, double eps, T* sum, T* y, T* mean, T* rstd);
template <typename T>
void add_layernorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight,
                                      const T* mean, const T* rstd, const T* dy, const T* dsum_in, T* dsum,
                                      T* dweight, T* dbias);
template <typename T>
void add_rmsnorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                                   const T* weight, double eps, T* sum, T* y, T* rstd);
template <typename T>
void add_rmsnorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight,
                                    const T* rstd, const T* dy, const T* dsum_in, T* dsum, T* dweight);

}  // namespace wf::kernels::cpu

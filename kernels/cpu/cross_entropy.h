#pragma once
// Fused softmax cross-entropy over a vocabulary, for row-major logits [rows, vocab] and one
// int64 target class per row:
//
//   loss_r = logsumexp(logits_r) - logits_r[target_r]
//
// The probabilities are never stored: the forward saves one log-sum-exp per row and the
// backward recomputes softmax from it straight into dlogits, so the only [rows, vocab] buffer
// besides the logits is the gradient (which may even overwrite the logits).
//
// Rows whose target equals ignore_index (padding) contribute nothing: loss 0, gradient 0, and
// they are not counted. Any other target outside [0, vocab) is a wf::Error naming the row and
// the value; it is checked before any output is written. Logits of any finite magnitude are
// safe (max-shifted, log-sum-exp in double); a row needs at least one logit above -inf.
// Rows run in parallel (OpenMP, above ~32K logits) and each row is computed independently, so
// results do not depend on the thread count.
#include <cstdint>

namespace wf::kernels::cpu {

// Checks every target (serially, before any parallel region: an exception must not escape
// OpenMP): each is ignore_index or in [0, vocab), else a wf::Error naming `what`, the row and the
// value. Returns how many are not ignored.
std::int64_t checked_target_count(const char* what, std::int64_t rows, std::int64_t vocab, const std::int64_t* targets,
                                  std::int64_t ignore_index);

// Writes losses[r] (0 for ignored rows) and lse[r] = logsumexp(logits_r) (for every row) and
// returns the number of rows that are not ignored.
template <typename T>
std::int64_t cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const T* logits, const std::int64_t* targets,
                                   std::int64_t ignore_index, T* losses /*[rows]*/, T* lse /*[rows]*/);

// The mean loss over non-ignored rows, sum(losses) / count, summed in double in row order.
// When every row is ignored (count == 0) the mean is defined as 0, not 0/0: no token
// contributes, and 0 matches the all-zero gradient such a batch gets (PyTorch returns NaN).
template <typename T>
T cross_entropy_mean(std::int64_t rows, const T* losses, std::int64_t count);
// sum(losses) over every row (ignored rows hold 0), in double in row order.
template <typename T>
T cross_entropy_sum(std::int64_t rows, const T* losses);

// dlogits_r = (softmax(logits_r) - onehot(target_r)) * grad_scale * row_grad[r], where
// grad_scale is dLoss/dloss_r (1/count for the mean, 1 for the sum) and row_grad, when not
// null, multiplies in a per-row upstream gradient (reduction "none"). Ignored rows get zeros.
// `lse` is the forward's. dlogits is overwritten and may alias logits.
template <typename T>
void cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const T* logits, const std::int64_t* targets,
                            std::int64_t ignore_index, const T* lse, double grad_scale, T* dlogits,
                            const T* row_grad /*[rows], nullable*/ = nullptr);

// ---- references: naive loops in double, for tests ----------------------------------------
template <typename T>
std::int64_t cross_entropy_forward_reference(std::int64_t rows, std::int64_t vocab, const T* logits,
                                             const std::int64_t* targets, std::int64_t ignore_index, T* losses,
                                             T* lse);
template <typename T>
void cross_entropy_backward_reference(std::int64_t rows, std::int64_t vocab, const T* logits,
                                      const std::int64_t* targets, std::int64_t ignore_index, const T* lse,
                                      double grad_scale, T* dlogits, const T* row_grad = nullptr);

}  // namespace wf::kernels::cpu

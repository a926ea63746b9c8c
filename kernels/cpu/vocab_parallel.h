#pragma once
// The per-rank pieces of vocabulary-parallel softmax cross-entropy (parallel/vocab_parallel.h):
// each rank holds logits x [rows, k], columns [start, start + k) of the padded vocabulary, of
// which the first `own` are real vocabulary (the rest padding, counted as -inf). Between the
// pieces the caller all-reduces the per-row numbers over the tensor-parallel group:
//
//   vocab_parallel_row_max   max[r] over this rank's real columns        -> all-reduce (max)
//   vocab_parallel_partials  [Σ exp(x − max) | the target logit or 0]    -> all-reduce (sum)
//   vocab_parallel_loss      lse[r] and the loss (sum, or mean over the counted rows)
//   vocab_parallel_backward  (softmax − onehot)·scale on this rank's columns
//
// All in double per row, each row independent (results do not depend on the thread count); the
// loss sums the rows in row order, as the single-device kernel (cross_entropy.h) does. The
// targets are checked (and counted) beforehand with cross_entropy.h's checked_target_count; the
// oracle is the single-device reference over the whole vocabulary (tests/kernels).
#include <cstdint>

namespace wf::kernels::cpu {

// max[r] = max over j < own of x[r, j], in double; -inf when own is 0 (a rank of padding only).
template <class T>
void vocab_parallel_row_max(std::int64_t rows, std::int64_t k, std::int64_t own, const T* x, double* max);

// sums[r] = Σ_{j < own} exp(x[r, j] − max[r]) (max: the all-reduced one); sums[rows + r] = the
// logit of row r's target when this rank holds it and it is not ignore_index, else 0.
template <class T>
void vocab_parallel_partials(std::int64_t rows, std::int64_t k, std::int64_t own, std::int64_t start, const T* x,
                             const double* max, const std::int64_t* targets, std::int64_t ignore_index,
                             double* sums /*[2·rows]*/);

// From the all-reduced max and sums: lse[r] = max[r] + log(sums[r]), and *loss = Σ over rows not
// ignored of lse[r] − target logit, in row order; divided by *count when count is not null (the
// mean; 0 when *count is 0).
void vocab_parallel_loss(std::int64_t rows, const double* max, const double* sums, const std::int64_t* targets,
                         std::int64_t ignore_index, const std::int64_t* count /*nullable*/, double* lse,
                         double* loss);

// dx[r, j] = exp(x[r, j] − lse[r])·grad_scale for j < own, expm1 of it at the target column (the
// difference p − 1 stays accurate near 1); 0 in ignored rows and padding columns. dx is
// overwritten.
template <class T>
void vocab_parallel_backward(std::int64_t rows, std::int64_t k, std::int64_t own, std::int64_t start, const T* x,
                             const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                             double grad_scale, T* dx);

// The vocabulary-parallel embedding's lookup plan for n replicated token ids, each in [0, vocab):
// a rank holding table rows [start, start + rows) maps the ids it holds to local[i] = id − start
// with mask[i] = 1, the others to row 0 with mask[i] = 0 (they add exactly zero). An id outside
// [0, vocab) is a wf::Error naming `what`, its flat index and value (checked before any output).
void vocab_parallel_local_ids(const char* what, std::int64_t n, std::int64_t vocab, std::int64_t start,
                              std::int64_t rows, const std::int64_t* ids, std::int64_t* local, double* mask);

}  // namespace wf::kernels::cpu

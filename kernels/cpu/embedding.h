#pragma once
// Token embedding lookup: out[t, :] = weight[ids[t], :] for a row-major table weight
// [vocab, dim] and int64 ids [num_tokens].
//
// Every id is checked against [0, vocab) before anything is written; a bad one is a wf::Error
// naming its position, its value and the vocabulary size.
//
// The backward is a scatter-add, and it is deterministic without atomics: tokens are grouped
// by id (a stable sort), each distinct id is owned by exactly one thread, which sums its
// tokens' gradient rows in token order (in double) and adds the total to the table once. So
// the result is bitwise the same for any thread count, and equal to the plain serial loop
// when T is double.
#include <cstdint>

namespace wf::kernels::cpu {

template <typename T>
void embedding_forward(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab, const T* weight /*[vocab, dim]*/,
                       const std::int64_t* ids /*[num_tokens]*/, T* out /*[num_tokens, dim]*/);

// dweight[ids[t], :] += dout[t, :] for every token (ACCUMULATED; rows of unused ids are left
// untouched).
template <typename T>
void embedding_backward(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab, const std::int64_t* ids,
                        const T* dout /*[num_tokens, dim]*/, T* dweight /*[vocab, dim], +=*/);

// ---- references: naive loops, double accumulation, for tests ----------------------------
template <typename T>
void embedding_forward_reference(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab, const T* weight,
                                 const std::int64_t* ids, T* out);
template <typename T>
void embedding_backward_reference(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab,
                                  const std::int64_t* ids, const T* dout, T* dweight);

}  // namespace wf::kernels::cpu

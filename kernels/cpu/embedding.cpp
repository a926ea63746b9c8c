#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

namespace {

// Serially, before any parallel region (an exception must not escape one).
void check_ids(const char* what, std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab,
               const std::int64_t* ids) {
  WF_CHECK(num_tokens >= 0 && dim >= 0 && vocab >= 0,
           "{}: sizes must be non-negative, got num_tokens={} dim={} vocab={}", what, num_tokens, dim, vocab);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    WF_CHECK(ids[t] >= 0 && ids[t] < vocab,
             "{}: token id {} at index {} is outside the vocabulary [0, {}); check the tokenizer's vocab size "
             "against the embedding table",
             what, ids[t], t, vocab);
  }
}

}  // namespace

template <typename T>
void embedding_forward(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab, const T* weight,
                       const std::int64_t* ids, T* out) {
  check_ids("embedding_forward", num_tokens, dim, vocab, ids);
#pragma omp parallel for if (num_tokens * dim > 32768)
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    std::copy_n(weight + ids[t] * dim, dim, out + t * dim);
  }
}

template <typename T>
void embedding_backward(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab, const std::int64_t* ids,
                        const T* dout, T* dweight) {
  check_ids("embedding_backward", num_tokens, dim, vocab, ids);
  // Token positions grouped by id, in token order within a group; group g is
  // by_id[starts[g] .. starts[g + 1]).
  std::vector<std::int64_t> by_id(static_cast<std::size_t>(num_tokens));
  std::iota(by_id.begin(), by_id.end(), std::int64_t{0});
  std::stable_sort(by_id.begin(), by_id.end(), [&](std::int64_t a, std::int64_t b) { return ids[a] < ids[b]; });
  std::vector<std::int64_t> starts;
  for (std::int64_t i = 0; i < num_tokens; ++i) {
    if (i == 0 || ids[by_id[i]] != ids[by_id[i - 1]]) starts.push_back(i);
  }
  starts.push_back(num_tokens);
  const auto groups = static_cast<std::int64_t>(starts.size()) - 1;

#pragma omp parallel if (num_tokens * dim > 32768)
  {
    std::vector<double> sum(static_cast<std::size_t>(dim));
    // Groups differ in size (frequent tokens), so they are handed out dynamically; which thread
    // takes a group does not change what it computes.
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t g = 0; g < groups; ++g) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (std::int64_t i = starts[g]; i < starts[g + 1]; ++i) {
        const T* row = dout + by_id[i] * dim;
        for (std::int64_t j = 0; j < dim; ++j) sum[j] += row[j];
      }
      T* target = dweight + ids[by_id[starts[g]]] * dim;
      for (std::int64_t j = 0; j < dim; ++j) target[j] = static_cast<T>(target[j] + sum[j]);
    }
  }
}

// ---- references ----------------------------------------------------------------------------

template <typename T>
void embedding_forward_reference(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab, const T* weight,
                                 const std::int64_t* ids, T* out) {
  check_ids("embedding_forward_reference", num_tokens, dim, vocab, ids);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    for (std::int64_t j = 0; j < dim; ++j) out[t * dim + j] = weight[ids[t] * dim + j];
  }
}

template <typename T>
void embedding_backward_reference(std::int64_t num_tokens, std::int64_t dim, std::int64_t vocab,
                                  const std::int64_t* ids, const T* dout, T* dweight) {
  check_ids("embedding_backward_reference", num_tokens, dim, vocab, ids);
  std::vector<double> sum(static_cast<std::size_t>(vocab * dim), 0.0);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    for (std::int64_t j = 0; j < dim; ++j) sum[ids[t] * dim + j] += dout[t * dim + j];
  }
  for (std::int64_t i = 0; i < vocab * dim; ++i) {
    dweight[i] = static_cast<T>(dweight[i] + sum[i]);
  }
}

#define WF_INSTANTIATE_EMBEDDING(T)                                                                           \
  template void embedding_forward<T>(std::int64_t, std::int64_t, std::int64_t, const T*, const std::int64_t*, \
                                     T*);                                                                     \
  template void embedding_backward<T>(std::int64_t, std::int64_t, std::int64_t, const std::int64_t*,         \
                                      const T*, T*);                                                          \
  template void embedding_forward_reference<T>(std::int64_t, std::int64_t, std::int64_t, const T*,           \
                                               const std::int64_t*, T*);                                      \
  template void embedding_backward_reference<T>(std::int64_t, std::int64_t, std::int64_t,                   \
                                                const std::int64_t*, const T*, T*);
WF_INSTANTIATE_EMBEDDING(float)
WF_INSTANTIATE_EMBEDDING(double)
#undef WF_INSTANTIATE_EMBEDDING

}  // namespace wf::kernels::cpu

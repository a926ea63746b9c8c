#pragma once
// Helpers the model tests share.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "wallfacer/core/rng.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/module.h"

namespace wf::models::testing {

// [batch, tokens] i64 ids, uniform in [0, vocab), a pure function of the seed.
inline Tensor random_ids(std::int64_t batch, std::int64_t tokens, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < batch * tokens; ++i) {
    ids.push_back(static_cast<std::int64_t>(uniform_at(seed, static_cast<std::uint64_t>(i)) * double(vocab)));
  }
  return Tensor::from_vector(ids, {batch, tokens});
}

// Positions 0 .. tokens−1 (i64).
inline Tensor positions_of(std::int64_t tokens) {
  return Tensor::arange(0, static_cast<double>(tokens), 1, DType::i64);
}

// A copy of every parameter's gradient, by name.
inline std::map<std::string, Tensor> grads_by_name(const nn::Module& model) {
  std::map<std::string, Tensor> grads;
  for (const auto& [name, p] : model.named_parameters()) grads[name] = p.grad().clone();
  return grads;
}

}  // namespace wf::models::testing

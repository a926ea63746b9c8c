#pragma once
// Helpers the model tests share.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "wallfacer/core/rng.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/models/decoder.h"
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

// Mixed precision (nn/precision.h) against the f32 model built from the same seed: `mixed` has
// set_compute_dtype(bf16). Its logits come back f32 (cast up for the loss), its stages exchange
// bf16, its parameters and their gradients stay f32; the loss lies within 1% of f32's (bf16
// keeps 8 significant bits; a small model's logits carry a few roundings each) and every
// gradient points the same way (cosine > 0.99) with the same size (within 5%).
inline void check_mixed_precision_matches_f32(DecoderLM& f32_model, DecoderLM& mixed, const Tensor& ids, const Tensor& targets) {
  const Tensor positions = positions_of(ids.size(1));
  const Batch batch = token_batch(ids, targets, positions);
  CHECK(mixed.forward(ids, positions).dtype() == DType::f32);
  CHECK(mixed.stage_hidden(batch).second == DType::bf16);
  std::vector<double> losses;
  std::vector<std::map<std::string, Tensor>> grads;
  for (DecoderLM* model : {&f32_model, &mixed}) {
    model->zero_grad();
    const LossSum loss = model->loss_sum(batch);
    losses.push_back(loss.sum.item() / loss.count.item());
    autograd::backward({loss.sum});
    grads.push_back(grads_by_name(*model));
  }
  CHECK(std::abs(losses[1] - losses[0]) / losses[0] < 0.01);
  REQUIRE(grads[0].size() == grads[1].size());
  for (const auto& [name, a] : grads[0]) {
    const Tensor& b = grads[1].at(name);
    INFO(name);
    CHECK(b.dtype() == DType::f32);  // the masters' gradients, accumulated in f32
    const auto x = a.to_vector<double>(), y = b.to_vector<double>();
    double dot = 0, xx = 0, yy = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      dot += x[i] * y[i];
      xx += x[i] * x[i];
      yy += y[i] * y[i];
    }
    if (xx == 0) continue;  // a row no token reaches
    CHECK(dot / std::sqrt(xx * yy) > 0.99);
    CHECK(std::abs(std::sqrt(yy / xx) - 1.0) < 0.05);
  }
  for (const Tensor& p : mixed.parameters()) CHECK(p.dtype() == DType::f32);
}

}  // namespace wf::models::testing

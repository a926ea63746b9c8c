#pragma once
// Autoregressive sampling from any model with logits (Model::has_logits; single process): the
// whole context is run again for every new token (no KV cache yet), cropped to the model's last
// max_context() tokens.
#include <cstdint>
#include <functional>
#include <vector>

#include "wallfacer/models/model.h"

namespace wf::models {

struct GenerateOptions {
  std::int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0: greedy (argmax)
  std::int64_t top_k = 40;   // sample among the k likeliest tokens; 0: all
  std::uint64_t seed = 0;    // the same seed and prompt give the same text
};

// The prompt followed by up to max_new_tokens sampled tokens; `on_token`, when set, is called
// with each new token as soon as it is drawn (to stream the text). wf::Error naming the model
// when it has no logits.
std::vector<std::uint32_t> generate(Model& model, const std::vector<std::uint32_t>& prompt, const GenerateOptions& options,
                                    const std::function<void(std::uint32_t)>& on_token = {});

// Index of the token drawn from logits[0, vocab) with temperature and top-k, using uniform `u`
// in [0, 1). Deterministic; exposed for tests.
std::int64_t sample_token(const float* logits, std::int64_t vocab, double temperature, std::int64_t top_k, double u);

}  // namespace wf::models

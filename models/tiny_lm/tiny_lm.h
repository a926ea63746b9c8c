#pragma once
// TinyLM: a small byte-level GPT (vocab 256 by default) built only from wf::nn pieces —
// token embedding + learned position embedding → n_layer causal pre-norm TransformerBlocks →
// final LayerNorm → LM head (tied to the token embedding unless tie_weights is false).
// Used by `wallfacer demo` and by tests that need a whole model.
#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/nn/nn.h"

namespace wf::models {

struct TinyLMOptions {
  std::int64_t vocab_size = 256;
  std::int64_t max_seq_len = 256;
  std::int64_t n_layer = 2;
  std::int64_t d_model = 64;
  std::int64_t n_head = 4;
  std::int64_t n_kv_head = 0;  // 0 → n_head
  std::int64_t d_ff = 0;       // 0 → 4·d_model
  nn::Activation activation = nn::Activation::gelu;
  nn::NormType norm = nn::NormType::layer_norm;
  double dropout = 0.0;
  bool tie_weights = true;
  bool checkpoint_mlp = false;  // activation checkpointing of every block's MLP
  std::uint64_t seed = 0;
};

class TinyLM : public nn::Module {
 public:
  explicit TinyLM(const TinyLMOptions& options);

  // ids [B, T] (i64, values < vocab_size) → logits [B, T, vocab_size]. position_offset: the
  // position of the first token (offset + T <= max_seq_len).
  Tensor forward(const Tensor& ids, std::int64_t position_offset = 0);
  // Mean cross-entropy of forward(ids) against targets [B, T] (i64): a 0-dim tensor.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  const TinyLMOptions& options() const { return options_; }
  nn::Embedding& token_embedding() { return *token_embedding_; }
  nn::TransformerBlock& block(std::size_t i);

 private:
  TinyLMOptions options_;
  std::shared_ptr<nn::Embedding> token_embedding_;
  std::shared_ptr<nn::Embedding> position_embedding_;
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks_;
  std::shared_ptr<nn::LayerNorm> final_norm_;
  std::shared_ptr<nn::Linear> lm_head_;  // null when tied
};

}  // namespace wf::models

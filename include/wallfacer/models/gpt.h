#pragma once
// GPT: a GPT-2 style decoder-only language model.
//
//   token embedding (+ learned position embedding, unless positions are RoPE)
//   → n_layer pre-norm TransformerBlocks (LayerNorm or RMSNorm; causal self-attention, MHA or
//     GQA, through the model's attention strategy; GELU MLP)
//   → final norm → LM head (tied to the token embedding unless tie_embeddings is false)
//
// Parameter names follow nn::Module's dotted paths ("blocks.0.attn.qkv.weight"), which the
// safetensors checkpoints and the PyTorch reference (tests/reference/) use too. Registered as
// "gpt" in the model registry (wallfacer/models/model.h).
#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/models/model.h"
#include "wallfacer/nn/nn.h"

namespace wf::models {

enum class GptPositions { learned, rope };

struct GptOptions {
  std::int64_t vocab_size = 256;
  std::int64_t max_seq_len = 1024;
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t n_kv_head = 0;  // 0 → n_head
  std::int64_t d_model = 256;
  std::int64_t d_ff = 0;  // 0 → 4·d_model
  nn::NormType norm = nn::NormType::layer_norm;
  GptPositions positions = GptPositions::learned;
  double rope_theta = 10000.0;
  bool tie_embeddings = true;
  double dropout = 0.0;
  bool bias = true;
  // Activation checkpoint at every block's attention output (WallFacer §4.6): a block keeps its
  // input, attention output and lse; the rest is recomputed in the backward, attention never.
  bool checkpoint_attention_output = false;
  double init_std = 0.02;
  std::uint64_t seed = 0;
};

// The model section of a run configuration as GptOptions, seeded with train.seed.
GptOptions gpt_options(const config::RunConfig& config);

class Gpt : public Model {
 public:
  explicit Gpt(const GptOptions& options);

  // ids [B, n] (i64) with positions [n] (i64, each < max_seq_len: the true position of every
  // token, which under sequence parallelism is not 0..n−1) → logits [B, n, vocab_size].
  Tensor forward(const Tensor& ids, const Tensor& positions);
  // The same for a whole sequence starting at position 0 (single process, generation).
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of forward(ids) against targets [B, n] (i64): a 0-dim tensor.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  std::string name() const override { return "gpt"; }
  Tensor loss_sum(const Tensor& inputs, const Tensor& targets, const Tensor& positions) override;
  double train_flops_per_token(std::int64_t seq_len) const override;
  bool causal() const override { return true; }

  const GptOptions& options() const { return options_; }
  std::size_t num_blocks() const { return blocks_.size(); }
  nn::TransformerBlock& block(std::size_t i);
  nn::Embedding& token_embedding() { return *token_embedding_; }

 private:
  GptOptions options_;
  std::shared_ptr<nn::Embedding> token_embedding_;
  std::shared_ptr<nn::Embedding> position_embedding_;  // null with RoPE
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks_;
  std::shared_ptr<nn::Normalization> final_norm_;
  std::shared_ptr<nn::Linear> lm_head_;  // null when tied
};

// The registry's factory for "gpt": gpt_options(config), and with sp > 1 the configured
// sequence-parallel attention strategy on the grid's sp groups.
std::shared_ptr<Model> make_gpt(const config::RunConfig& config, comm::CommGrid& grid);

}  // namespace wf::models

#include "models/tiny_lm/tiny_lm.h"

#include <cmath>
#include <string>

#include "wallfacer/ops/ops.h"

namespace wf::models {

TinyLM::TinyLM(const TinyLMOptions& options) : Module(options.seed), options_(options) {
  const auto& o = options_;
  WF_CHECK(o.vocab_size > 0 && o.max_seq_len > 0 && o.n_layer > 0 && o.d_model > 0 && o.n_head > 0,
           "TinyLM: vocab_size, max_seq_len, n_layer, d_model and n_head must be positive, got {}, {}, {}, {}, {}",
           o.vocab_size, o.max_seq_len, o.n_layer, o.d_model, o.n_head);
  constexpr double kInitStd = 0.02;
  token_embedding_ = register_module(
      "token_embedding", std::make_shared<nn::Embedding>(nn::EmbeddingOptions{
                             .num_embeddings = o.vocab_size, .dim = o.d_model, .seed = child_seed("token_embedding")}));
  position_embedding_ = register_module(
      "position_embedding",
      std::make_shared<nn::Embedding>(nn::EmbeddingOptions{
          .num_embeddings = o.max_seq_len, .dim = o.d_model, .seed = child_seed("position_embedding")}));
  auto blocks = register_module("blocks", std::make_shared<nn::ModuleList>(child_seed("blocks")));
  for (std::int64_t i = 0; i < o.n_layer; ++i) {
    blocks_.push_back(blocks->append(std::make_shared<nn::TransformerBlock>(nn::TransformerBlockOptions{
        .d_model = o.d_model,
        .n_head = o.n_head,
        .n_kv_head = o.n_kv_head,
        .d_ff = o.d_ff,
        .activation = o.activation,
        .norm = o.norm,
        .causal = true,
        .dropout = o.dropout,
        .init_std = kInitStd,
        // GPT-2: residual projections scaled so the residual stream's variance does not grow
        // with depth (two per block).
        .out_init_std = kInitStd / std::sqrt(2.0 * static_cast<double>(o.n_layer)),
        .checkpoint_mlp = o.checkpoint_mlp,
        .seed = blocks->next_seed()})));
  }
  final_norm_ = register_module("final_norm", std::make_shared<nn::LayerNorm>(o.d_model));
  if (!o.tie_weights) {
    lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(nn::LinearOptions{
                                              .in_features = o.d_model,
                                              .out_features = o.vocab_size,
                                              .bias = false,
                                              .init_std = kInitStd,
                                              .seed = child_seed("lm_head")}));
  }
}

Tensor TinyLM::forward(const Tensor& ids, std::int64_t position_offset) {
  WF_CHECK(ids.dim() == 2, "TinyLM: ids must be [batch, tokens], got {}", shape_str(ids.shape()));
  const std::int64_t tokens = ids.size(1);
  WF_CHECK(position_offset >= 0 && position_offset + tokens <= options_.max_seq_len,
           "TinyLM: positions [{}, {}) exceed max_seq_len {}; build the model with a larger max_seq_len",
           position_offset, position_offset + tokens, options_.max_seq_len);
  const Tensor positions = Tensor::arange(static_cast<double>(position_offset),
                                          static_cast<double>(position_offset + tokens), 1.0, DType::i64);
  // [B, T, D] + [T, D] (broadcast over the batch).
  Tensor x = add(token_embedding_->forward(ids), position_embedding_->forward(positions));
  for (auto& block : blocks_) x = block->forward(x, position_offset);
  x = final_norm_->forward(x);
  return lm_head_ ? lm_head_->forward(x) : linear(x, token_embedding_->weight());
}

Tensor TinyLM::loss(const Tensor& ids, const Tensor& targets) {
  WF_CHECK(targets.shape() == ids.shape(), "TinyLM::loss: targets {} must have the shape of ids {}",
           shape_str(targets.shape()), shape_str(ids.shape()));
  return cross_entropy(forward(ids), targets);
}

nn::TransformerBlock& TinyLM::block(std::size_t i) {
  WF_CHECK(i < blocks_.size(), "TinyLM: block {} out of range ({} blocks)", i, blocks_.size());
  return *blocks_[i];
}

}  // namespace wf::models

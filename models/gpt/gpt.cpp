#include "wallfacer/models/gpt.h"

#include <cmath>

#include "wallfacer/ops/ops.h"

namespace wf::models {
namespace {

const ModelRegistration kRegisterGpt("gpt", make_gpt);

// Elements of a [rows, cols] matmul weight: 2·rows·cols FLOPs per token forward, 3× that with
// the backward (input and weight gradients).
double matmul_train_flops(std::int64_t rows, std::int64_t cols) {
  return 6.0 * static_cast<double>(rows) * static_cast<double>(cols);
}

}  // namespace

GptOptions gpt_options(const config::RunConfig& config) {
  const config::ModelConfig& m = config.model;
  GptOptions o;
  o.vocab_size = m.vocab_size;
  o.max_seq_len = m.max_seq_len;
  o.n_layer = m.n_layer;
  o.n_head = m.n_head;
  o.n_kv_head = m.n_kv_head;
  o.d_model = m.d_model;
  o.d_ff = m.d_ff;
  o.norm = m.norm == config::NormKind::rmsnorm ? nn::NormType::rms_norm : nn::NormType::layer_norm;
  o.positions = m.positions == config::PositionKind::rope ? GptPositions::rope : GptPositions::learned;
  o.tie_embeddings = m.tie_embeddings;
  o.dropout = m.dropout;
  o.checkpoint_attention_output = m.checkpoint_attention;
  o.seed = static_cast<std::uint64_t>(config.train.seed);
  return o;
}

Gpt::Gpt(const GptOptions& options) : Model(options.seed), options_(options) {
  auto& o = options_;
  if (o.n_kv_head == 0) o.n_kv_head = o.n_head;
  if (o.d_ff == 0) o.d_ff = 4 * o.d_model;
  WF_CHECK(o.vocab_size > 0 && o.max_seq_len > 0 && o.n_layer > 0 && o.d_model > 0 && o.n_head > 0,
           "Gpt: vocab_size, max_seq_len, n_layer, d_model and n_head must be positive, got {}, {}, {}, {}, {}",
           o.vocab_size, o.max_seq_len, o.n_layer, o.d_model, o.n_head);
  token_embedding_ = register_module(
      "token_embedding",
      std::make_shared<nn::Embedding>(nn::EmbeddingOptions{
          .num_embeddings = o.vocab_size, .dim = o.d_model, .init_std = o.init_std, .seed = child_seed("token_embedding")}));
  if (o.positions == GptPositions::learned) {
    position_embedding_ = register_module(
        "position_embedding", std::make_shared<nn::Embedding>(nn::EmbeddingOptions{.num_embeddings = o.max_seq_len,
                                                                                   .dim = o.d_model,
                                                                                   .init_std = o.init_std,
                                                                                   .seed = child_seed("position_embedding")}));
  }
  auto blocks = register_module("blocks", std::make_shared<nn::ModuleList>(child_seed("blocks")));
  for (std::int64_t i = 0; i < o.n_layer; ++i) {
    blocks_.push_back(blocks->append(std::make_shared<nn::TransformerBlock>(nn::TransformerBlockOptions{
        .d_model = o.d_model,
        .n_head = o.n_head,
        .n_kv_head = o.n_kv_head,
        .d_ff = o.d_ff,
        .activation = nn::Activation::gelu,
        .norm = o.norm,
        .causal = true,
        .dropout = o.dropout,
        .bias = o.bias,
        .init_std = o.init_std,
        // GPT-2: the two residual projections of each block are scaled so the residual stream's
        // variance does not grow with depth.
        .out_init_std = o.init_std / std::sqrt(2.0 * static_cast<double>(o.n_layer)),
        .rope = o.positions == GptPositions::rope,
        .rope_theta = o.rope_theta,
        .checkpoint_attention_output = o.checkpoint_attention_output,
        .seed = blocks->next_seed()})));
  }
  final_norm_ = register_module("final_norm", nn::make_norm(o.norm, o.d_model, nn::TransformerBlockOptions{}.norm_eps));
  if (!o.tie_embeddings) {
    lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(nn::LinearOptions{.in_features = o.d_model,
                                                                                         .out_features = o.vocab_size,
                                                                                         .bias = false,
                                                                                         .init_std = o.init_std,
                                                                                         .seed = child_seed("lm_head")}));
  }
}

Tensor Gpt::forward(const Tensor& ids, const Tensor& positions) {
  WF_CHECK(ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
           "Gpt: ids must be [batch, tokens] of i64 or i32, got {} {}", dtype_name(ids.dtype()), shape_str(ids.shape()));
  WF_CHECK(positions.dim() == 1 && positions.dtype() == DType::i64 && positions.size(0) == ids.size(1),
           "Gpt: positions must be [tokens] i64 with tokens = {} (the ids' second dim), got {} {}", ids.size(1),
           dtype_name(positions.dtype()), shape_str(positions.shape()));
  const std::int64_t* p = positions.data<std::int64_t>();
  for (std::int64_t i = 0; i < positions.numel(); ++i) {
    WF_CHECK(p[i] >= 0 && p[i] < options_.max_seq_len,
             "Gpt: position {} is outside [0, max_seq_len = {}); raise model.max_seq_len or shorten train.seq_len",
             p[i], options_.max_seq_len);
  }
  Tensor x = token_embedding_->forward(ids);  // [B, n, d]
  // [B, n, d] + [n, d], broadcast over the batch.
  if (position_embedding_) x = add(x, position_embedding_->forward(positions));
  for (auto& block : blocks_) x = block->forward(x, positions);
  x = final_norm_->forward(x);
  return lm_head_ ? lm_head_->forward(x) : linear(x, token_embedding_->weight());
}

Tensor Gpt::forward(const Tensor& ids) {
  WF_CHECK(ids.dim() == 2, "Gpt: ids must be [batch, tokens], got {}", shape_str(ids.shape()));
  return forward(ids, Tensor::arange(0.0, static_cast<double>(ids.size(1)), 1.0, DType::i64));
}

Tensor Gpt::loss(const Tensor& ids, const Tensor& targets) {
  WF_CHECK(targets.shape() == ids.shape(), "Gpt: targets {} must have the shape of ids {}", shape_str(targets.shape()),
           shape_str(ids.shape()));
  return cross_entropy(forward(ids), targets);
}

Tensor Gpt::loss_sum(const Tensor& inputs, const Tensor& targets, const Tensor& positions) {
  WF_CHECK(targets.shape() == inputs.shape(), "Gpt: targets {} must have the shape of inputs {}",
           shape_str(targets.shape()), shape_str(inputs.shape()));
  // cross_entropy averages over the targets; the trainer wants the sum (model.h).
  return scale(cross_entropy(forward(inputs, positions), targets), static_cast<double>(targets.numel()));
}

double Gpt::train_flops_per_token(std::int64_t seq_len) const {
  const auto& o = options_;
  const std::int64_t head_dim = o.d_model / o.n_head;
  const double per_layer = matmul_train_flops(o.d_model, (o.n_head + 2 * o.n_kv_head) * head_dim) +  // qkv
                           matmul_train_flops(o.d_model, o.d_model) +                               // proj
                           2.0 * matmul_train_flops(o.d_model, o.d_ff);                             // MLP
  // Attention: QKᵀ and PV cost 2·2·d per (query, key) pair forward, 3× with the backward; a
  // causal query sees (seq_len + 1) / 2 keys on average.
  const double keys_per_query = static_cast<double>(seq_len + 1) / 2.0;
  const double attention = 12.0 * static_cast<double>(o.d_model) * keys_per_query;
  const double head = matmul_train_flops(o.d_model, o.vocab_size);
  return static_cast<double>(o.n_layer) * (per_layer + attention) + head;
}

nn::TransformerBlock& Gpt::block(std::size_t i) {
  WF_CHECK(i < blocks_.size(), "Gpt: block {} out of range ({} blocks)", i, blocks_.size());
  return *blocks_[i];
}

std::shared_ptr<Model> make_gpt(const config::RunConfig& config, comm::CommGrid& grid) {
  auto model = std::make_shared<Gpt>(gpt_options(config));
  if (config.parallel.sp > 1) {
    nn::set_attention_strategy(*model, parallel::make_sp_attention(sp_attention_config(config, model->causal()), grid));
  }
  return model;
}

}  // namespace wf::models

// parallel_residual: a GPT-J / PaLM-style decoder with QK-norm, as a family of its own built from
// nn parts in this file alone (the worked example of docs/adding-a-model.md). Each block adds
// attention and the feed-forward side by side onto the residual stream, from one norm of it:
//
//   out = x + attn(norm(x)) + mlp(norm(x))
//
// and normalises q and k per head (one weight of head_dim shared by every head, LayerNorm or
// RMSNorm as model.norm) before rotating them (RoPE), which keeps the attention logits bounded.
// The rest is the DecoderLM: token embedding, final norm, tied or untied head, stages, the
// layouts. Registered as "parallel_residual" with its `model:` keys:
//
//   n_layer n_head n_kv_head (0 = n_head) d_model d_ff (0 = 4·d_model) vocab_size max_seq_len
//   norm (layernorm|rmsnorm) norm_eps rope_theta tie_embeddings dropout bias checkpoint_attention
//   init_std
//
// Preset: configs/parallel-residual-tiny.yaml.
#include "wallfacer/models/decoder.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/rope.h"

namespace wf::models {
namespace {

constexpr const char* kName = "parallel_residual";

class ParallelResidualBlock final : public nn::SequenceBlock {
 public:
  // `o`: what the decoder derives for this block (decoder_block_options), its seed included.
  explicit ParallelResidualBlock(const nn::TransformerBlockOptions& o) : SequenceBlock(o.seed), options_(o) {
    const nn::LayerFactory& layers = nn::layers_or_default(o.layers);
    nn::SelfAttentionOptions attention = nn::block_attention_options(o, child_seed("attn"));
    attention.rope = false;  // rotated below, after the QK-norm
    norm_ = register_module("norm", nn::make_block_norm(o));
    attn_ = register_module("attn", std::make_shared<nn::SelfAttention>(attention));
    // On this rank's heads only, which tp splits: a weight whole on every rank whose gradient
    // each rank computes in part (ActivationRegion::split marks it so; summed over tp).
    q_norm_ = register_module("q_norm", layers.norm(o.norm, head_dim(o), o.norm_eps, nn::ActivationRegion::split));
    k_norm_ = register_module("k_norm", layers.norm(o.norm, head_dim(o), o.norm_eps, nn::ActivationRegion::split));
    mlp_ = register_module("mlp", nn::make_block_feed_forward(o, nn::block_feed_forward_options(o, child_seed("mlp"))));
  }

  static std::int64_t head_dim(const nn::TransformerBlockOptions& o) { return o.d_model / o.n_head; }

  // Counted without building one (DecoderBlock::parameters): the attention, the feed-forward, the
  // block's norm and the two per-head norms.
  static double parameter_count(const nn::TransformerBlockOptions& o) {
    return nn::self_attention_parameter_count(nn::block_attention_options(o, 0)) + nn::feed_forward_parameter_count(o) +
           nn::norm_parameter_count(o.norm, o.d_model) + 2 * nn::norm_parameter_count(o.norm, head_dim(o));
  }

  Tensor forward(const Tensor& x, const nn::TokenPositions& where) override {
    const Tensor& positions = where.positions;
    // The block split at its attention (nn/attention_checkpoint.h): with the checkpoint both
    // halves run again in the backward, so they capture by value; attention is replayed.
    nn::AttentionSplit split;
    split.before = [this, positions](const autograd::TensorList& in) {
      nn::AttentionHeads heads = attn_->project(norm_->forward(in[0]), Tensor());
      heads.q = rope(q_norm_->forward(heads.q), positions, options_.rope_theta);
      heads.k = rope(k_norm_->forward(heads.k), positions, options_.rope_theta);
      return heads;
    };
    split.after = [this](const autograd::TensorList& in, const Tensor& attention_out) {
      const Tensor& x = in[0];
      return autograd::TensorList{add(add(x, attn_->output(attention_out)), mlp_->forward(norm_->forward(x)))};
    };
    split.strategy = attn_->strategy();  // sequence parallelism swaps it in (set_attention_strategy)
    split.options = attn_->attention_options(where);  // a sequence-parallel strategy knows its layout
    return nn::run_attention_block(std::move(split), {x}, options_.checkpoint_attention)[0];
  }

 private:
  nn::TransformerBlockOptions options_;
  std::shared_ptr<nn::Normalization> norm_, q_norm_, k_norm_;
  std::shared_ptr<nn::SelfAttention> attn_;
  std::shared_ptr<nn::FeedForward> mlp_;
};

const config::ModelKeys<DecoderOptions>& parallel_residual_keys() {
  // Built on first use: registration runs from static initialisers (see gpt.cpp).
  static const auto keys = [] {
    const config::Choices<nn::NormType> kNorms = {{"layernorm", nn::NormType::layer_norm},
                                                  {"rmsnorm", nn::NormType::rms_norm}};
    config::ModelKeys<DecoderOptions> k;
    add_decoder_keys(k).choice("norm", &DecoderOptions::norm, kNorms).boolean("bias", &DecoderOptions::bias);
    return k;
  }();
  return keys;
}

DecoderOptions parallel_residual_options(const config::RunConfig& config) {
  DecoderOptions o = options_from_config(parallel_residual_keys(), config);
  o.positions = DecoderPositions::rope;  // no position table: the block rotates q and k
  o.block = {.build = [](const nn::TransformerBlockOptions& b) { return std::make_shared<ParallelResidualBlock>(b); },
             .parameters = ParallelResidualBlock::parameter_count};
  return o;
}

std::shared_ptr<Model> make_parallel_residual(const config::RunConfig& config, comm::CommGrid& grid) {
  DecoderOptions options = parallel_residual_options(config);
  place_on_grid(options, config, grid);
  return with_sp_attention(std::make_shared<DecoderLM>(kName, options), config, grid);
}

const ModelRegistration kRegisterParallelResidual(decoder_schema(kName, parallel_residual_keys().keys(),
                                                                 parallel_residual_options),
                                                  make_parallel_residual);

}  // namespace
}  // namespace wf::models

#include "wallfacer/nn/adaln.h"

#include "wallfacer/nn/attention_checkpoint.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf::nn {
namespace {

// [B, d] → [B, 1, d]: a per-sample vector broadcast over the tokens.
Tensor per_sample(const Tensor& v, const Tensor& x, const char* what) {
  WF_CHECK(v.dim() == 2 && x.dim() == 3 && v.size(0) == x.size(0) && v.size(1) == x.size(2),
           "{}: the conditioning must be [batch, d] = [{}, {}] for x {}, got {}", what, x.dim() == 3 ? x.size(0) : -1,
           x.dim() == 3 ? x.size(2) : -1, shape_str(x.shape()), shape_str(v.shape()));
  return reshape(v, {v.size(0), 1, v.size(1)});
}

}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  return add(mul(x, add_scalar(per_sample(scale, x, "modulate"), 1.0)), per_sample(shift, x, "modulate"));
}

Tensor gate(const Tensor& gate_values, const Tensor& y) { return mul(per_sample(gate_values, y, "gate"), y); }

std::shared_ptr<Linear> make_modulation(const LayerFactory& layers, std::int64_t d_model, std::int64_t outputs,
                                        double init_std, std::uint64_t seed) {
  WF_CHECK(d_model > 0 && outputs > 0, "adaLN modulation: d_model and outputs must be positive, got {} and {}", d_model,
           outputs);
  return layers.linear(
      LinearOptions{.in_features = d_model, .out_features = outputs * d_model, .init_std = init_std, .seed = seed},
      LinearRole::replicated);
}

std::vector<Tensor> modulations(Linear& modulation, const Tensor& c) {
  const std::int64_t d = modulation.options().in_features;
  WF_CHECK(c.dim() == 2 && c.size(1) == d, "adaLN modulation: c must be [batch, {}], got {}", d, shape_str(c.shape()));
  return split(modulation.forward(silu(c)), d, 1);
}

AdaLNZeroBlock::AdaLNZeroBlock(const AdaLNZeroBlockOptions& options) : Module(options.seed), options_(options) {
  const auto& o = options_;
  WF_CHECK(o.d_model > 0 && o.n_head > 0, "AdaLNZeroBlock: d_model and n_head must be positive, got {} and {}",
           o.d_model, o.n_head);
  modulation_ = register_module("adaLN", make_modulation(layers_or_default(o.layers), o.d_model, 6,
                                                         o.modulation_init_std, child_seed("adaLN")));
  norm1_ = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.norm_eps, /*affine=*/false));
  attn_ = register_module("attn", std::make_shared<SelfAttention>(SelfAttentionOptions{
                                      .d_model = o.d_model,
                                      .n_head = o.n_head,
                                      .causal = o.causal,
                                      .dropout = o.dropout,
                                      .init_std = o.init_std,
                                      .weight_init = o.weight_init,
                                      .seed = child_seed("attn"),
                                      .layers = o.layers}));
  norm2_ = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.norm_eps, /*affine=*/false));
  mlp_ = register_module("mlp", std::make_shared<MLP>(MLPOptions{.d_model = o.d_model,
                                                                .d_ff = o.d_ff,
                                                                .activation = Activation::gelu,
                                                                .dropout = o.dropout,
                                                                .init_std = o.init_std,
                                                                .weight_init = o.weight_init,
                                                                .seed = child_seed("mlp"),
                                                                .layers = o.layers}));
}

Tensor AdaLNZeroBlock::forward(const Tensor& x, const Tensor& c, const Tensor& positions) {
  WF_CHECK(x.defined() && x.dim() == 3 && x.size(2) == options_.d_model,
           "AdaLNZeroBlock: x must be [batch, tokens, {}], got {}", options_.d_model,
           x.defined() ? shape_str(x.shape()) : "undefined");
  WF_CHECK(layers_or_default(options_.layers).activation_token_parts() == 1,
           "AdaLNZeroBlock: tensor-parallel activation sharding is not supported (its modulation gradients would "
           "be partial sums over each rank's tokens); set parallel.tp_shard_activations: false");
  // Both halves recompute the modulation from c (a [B, d] × [d, 6d] product): the checkpoint at
  // the attention output then keeps only x, c, the attention output and its lse.
  AttentionSplit split;
  split.before = [this, positions](const autograd::TensorList& in) {
    const std::vector<Tensor> m = modulations(*modulation_, in[1]);
    return attn_->project(modulate(norm1_->forward(in[0]), m[0], m[1]), positions);
  };
  split.after = [this](const autograd::TensorList& in, const Tensor& attention_out) {
    const std::vector<Tensor> m = modulations(*modulation_, in[1]);
    // The gated residual add and norm2 in one pass (bitwise the add, then norm2).
    const AddNorm h = norm2_->forward_add(in[0], gate(m[2], attn_->output(attention_out)));
    return autograd::TensorList{add(h.sum, gate(m[5], mlp_->forward(modulate(h.y, m[3], m[4]))))};
  };
  split.strategy = attn_->strategy();
  split.options = attn_->attention_options(0);
  return run_attention_block(std::move(split), {x, c}, options_.checkpoint_attention)[0];
}

AdaLNFinalLayer::AdaLNFinalLayer(const AdaLNFinalLayerOptions& o) : Module(o.seed) {
  const LayerFactory& layers = layers_or_default(o.layers);
  modulation_ = register_module("adaLN", make_modulation(layers, o.d_model, 2, o.init_std, child_seed("adaLN")));
  norm_ = register_module("norm", std::make_shared<LayerNorm>(o.d_model, o.norm_eps, /*affine=*/false));
  linear_ = register_module(
      "linear", layers.linear(LinearOptions{.in_features = o.d_model, .out_features = o.out_features,
                                            .init_std = o.init_std, .seed = child_seed("linear")},
                              LinearRole::replicated));
}

Tensor AdaLNFinalLayer::forward(const Tensor& x, const Tensor& c) {
  const std::vector<Tensor> m = modulations(*modulation_, c);
  return linear_->forward(modulate(norm_->forward(x), m[0], m[1]));
}

}  // namespace wf::nn

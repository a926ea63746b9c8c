#pragma once
// Adaptive LayerNorm conditioning (adaLN-Zero; Peebles & Xie, "Scalable Diffusion Models with
// Transformers", 2023): a block whose norms are modulated by a conditioning vector c [B, d]
// (a diffusion timestep and class embedding) instead of learned affine parameters.
//
//   modulations:      c → SiLU → Linear(d, k·d) → k tensors [B, d]   (zero-initialised)
//   modulate(x, shift, scale) = x · (1 + scale) + shift, broadcast over the tokens of x [B, T, d]
//   AdaLNZeroBlock:
//     shift₁, scale₁, gate₁, shift₂, scale₂, gate₂ = modulation(c)
//     h   = x + gate₁ · attn(modulate(norm1(x), shift₁, scale₁))
//     out = h + gate₂ · mlp(modulate(norm2(h), shift₂, scale₂))
//   with norm1, norm2 LayerNorms without affine parameters (eps 1e-6).
// Zero-initialised modulation makes every gate 0, so a fresh block is the identity.
//
// Attention goes through nn::SelfAttention (full mask by default), so the run's
// sequence-parallel strategy and the checkpoint at the attention output apply as in
// TransformerBlock: the block is a two-input (x, c) nn::run_attention_block. Its weights come
// from the options' LayerFactory: qkv and fc column-parallel, proj row-parallel; the modulation
// is replicated (every tensor-parallel rank holds the whole [B, d] conditioning stream, and its
// gradient is complete on each of them because the residual stream is). Parameter names:
// adaLN.{weight,bias}, attn.{qkv,proj}, mlp.{fc,proj}.
#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/mlp.h"
#include "wallfacer/nn/norm.h"
#include "wallfacer/nn/self_attention.h"

namespace wf::nn {

// x [B, T, d] · (1 + scale[B, d]) + shift[B, d], the two broadcast over T (differentiable).
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);
// gate[B, d] · y[B, T, d], broadcast over T.
Tensor gate(const Tensor& gate_values, const Tensor& y);

// The modulation linear (SiLU(c) → Linear(d, outputs·d)), replicated under tensor parallelism
// (every rank holds the whole [B, d] conditioning); init_std 0 is adaLN-Zero's zero init.
std::shared_ptr<Linear> make_modulation(const LayerFactory& layers, std::int64_t d_model, std::int64_t outputs,
                                        double init_std, std::uint64_t seed);
// c [B, d] → the modulation's `outputs` tensors [B, d], in its output order.
std::vector<Tensor> modulations(Linear& modulation, const Tensor& c);

struct AdaLNZeroBlockOptions {
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t d_ff = 0;  // 0 → 4·d_model
  double norm_eps = 1e-6;
  bool causal = false;
  double dropout = 0.0;
  // DiT initialises its linears Xavier-uniform and zeroes the modulation.
  WeightInit weight_init = WeightInit::xavier_uniform;
  double init_std = 0.02;  // for weight_init normal
  double modulation_init_std = 0.0;
  bool checkpoint_attention = false;
  std::uint64_t seed = 0;
  std::shared_ptr<const LayerFactory> layers = nullptr;
};

class AdaLNZeroBlock : public Module {
 public:
  explicit AdaLNZeroBlock(const AdaLNZeroBlockOptions& options);

  // x [B, T, d], c [B, d], positions [T] i64 (each token's global index, any layout; the
  // sequence-parallel strategy knows its layout) → [B, T, d].
  Tensor forward(const Tensor& x, const Tensor& c, const Tensor& positions);

  SelfAttention& attention() { return *attn_; }
  MLP& mlp() { return *mlp_; }
  Linear& modulation() { return *modulation_; }
  void set_checkpointing(bool attention_output) { options_.checkpoint_attention = attention_output; }
  const AdaLNZeroBlockOptions& options() const { return options_; }

 private:
  AdaLNZeroBlockOptions options_;
  std::shared_ptr<Linear> modulation_;
  std::shared_ptr<LayerNorm> norm1_;
  std::shared_ptr<SelfAttention> attn_;
  std::shared_ptr<LayerNorm> norm2_;
  std::shared_ptr<MLP> mlp_;
};

// The output layer of an adaLN-conditioned stack (DiT's FinalLayer):
//   shift, scale = adaLN(c);  out = linear(modulate(LayerNorm(x), shift, scale))
// with LayerNorm without affine parameters (eps 1e-6) and, as published, a zero-initialised
// modulation and linear. Parameter names: adaLN.{weight,bias}, linear.{weight,bias}.
struct AdaLNFinalLayerOptions {
  std::int64_t d_model = 0;
  std::int64_t out_features = 0;
  double norm_eps = 1e-6;
  double init_std = 0.0;  // modulation and linear; 0: zeros
  std::uint64_t seed = 0;
  std::shared_ptr<const LayerFactory> layers = nullptr;
};

class AdaLNFinalLayer : public Module {
 public:
  explicit AdaLNFinalLayer(const AdaLNFinalLayerOptions& options);
  // x [B, T, d], c [B, d] → [B, T, out_features].
  Tensor forward(const Tensor& x, const Tensor& c);

 private:
  std::shared_ptr<Linear> modulation_;
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Linear> linear_;
};

}  // namespace wf::nn

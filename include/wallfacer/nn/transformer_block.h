#pragma once
// TransformerBlock, pre-norm (GPT-2, LLaMA):  h = x + attn(norm1(x));  out = h + ff(norm2(h)).
//
// Its parts are chosen by the options: the norms (LayerNorm or RMSNorm, or a user's through
// make_norm), the feed-forward (the GELU MLP, SwiGLU, or a user's FeedForward through
// make_feed_forward), and the LayerFactory every weight-holding layer comes from (plain, or
// tensor-parallel later). Parameter names: norm1, attn.{qkv,proj}, norm2, mlp.{fc,proj} or
// mlp.{gate,up,down}.
//
// Activation checkpointing (applies only while a graph is being recorded, and x requires grad):
//  - checkpoint_attention (attention_checkpoint.h, the WallFacer paper's §4.6): the block
//    keeps only x, the attention output and its lse; the rest is recomputed in backward and
//    attention is replayed, never run twice.
//  - checkpoint_mlp: only the norm2 + feed-forward branch keeps just its input and is
//    recomputed. No effect when checkpoint_attention is on (it is recomputed anyway).
#include <cstdint>
#include <functional>
#include <memory>

#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/mlp.h"
#include "wallfacer/nn/norm.h"
#include "wallfacer/nn/self_attention.h"
#include "wallfacer/nn/sequence_block.h"

namespace wf::nn {

enum class FeedForwardKind { mlp, swiglu };
const char* feed_forward_name(FeedForwardKind kind);

struct TransformerBlockOptions {
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;  // 0 → n_head
  std::int64_t d_ff = 0;       // 0 → 4·d_model
  Activation activation = Activation::gelu;  // the MLP's (SwiGLU always gates with SiLU)
  NormType norm = NormType::layer_norm;
  double norm_eps = 1e-5;
  bool causal = true;
  double dropout = 0.0;
  bool bias = true;
  double init_std = 0.02;
  double out_init_std = 0.0;  // the two residual projections; 0 → init_std
  bool rope = false;  // rotary position embedding on q and k (SelfAttentionOptions::rope)
  double rope_theta = 10000.0;
  bool checkpoint_attention = false;
  bool checkpoint_mlp = false;
  std::uint64_t seed = 0;
  FeedForwardKind feed_forward = FeedForwardKind::mlp;
  // A user's feed-forward instead of `feed_forward`: called with the MLP options the block
  // would use (width, dropout, init, seed "mlp", layer factory).
  std::function<std::shared_ptr<FeedForward>(const MLPOptions&)> make_feed_forward = nullptr;
  // A user's normalisation instead of `norm`: called with (d_model, norm_eps).
  std::function<std::shared_ptr<Normalization>(std::int64_t dim, double eps)> make_norm = nullptr;
  std::shared_ptr<const LayerFactory> layers = nullptr;  // null: the plain layers
};

class TransformerBlock : public SequenceBlock {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& options);

  // x [B, T, d_model] → [B, T, d_model]; position_offset and where as in SelfAttention::forward
  // (where.positions [T] i64: each token's global position, any layout; or [B, T] per row with
  // where.documents, packed documents).
  Tensor forward(const Tensor& x, std::int64_t position_offset = 0);
  Tensor forward(const Tensor& x, const TokenPositions& where) override;

  SelfAttention& attention() { return *attn_; }
  FeedForward& feed_forward() { return *mlp_; }
  // The feed-forward as the GELU MLP; wf::Error when the block uses another.
  MLP& mlp();
  void set_checkpointing(bool attention_output, bool mlp);
  const TransformerBlockOptions& options() const { return options_; }

 private:
  Tensor run(const Tensor& x, const Tensor& positions, const AttentionOptions& attention_options);
  // The part of the block after attention: x + attn.output(out) → h; h + ff(norm2(h)).
  Tensor after_attention(const Tensor& x, const Tensor& attention_out, bool checkpoint_mlp);

  TransformerBlockOptions options_;
  std::shared_ptr<Normalization> norm1_;
  std::shared_ptr<SelfAttention> attn_;
  std::shared_ptr<Normalization> norm2_;
  std::shared_ptr<FeedForward> mlp_;
};

// The parts TransformerBlock builds from its options, for a block of another shape built from the
// same options (a model family's SequenceBlock, docs/adding-a-model.md): the attention's and the
// feed-forward's options (width, dropout, bias, init, the residual projections' out_init_std,
// the layer factory, and `seed`), the feed-forward they describe (options.feed_forward, or
// make_feed_forward) and a d_model-wide norm (options.norm through the factory, or make_norm).
SelfAttentionOptions block_attention_options(const TransformerBlockOptions& options, std::uint64_t seed);
MLPOptions block_feed_forward_options(const TransformerBlockOptions& options, std::uint64_t seed);
std::shared_ptr<FeedForward> make_block_feed_forward(const TransformerBlockOptions& options, const MLPOptions& mlp);
std::shared_ptr<Normalization> make_block_norm(const TransformerBlockOptions& options);

// Parameter counts without building anything (validate's memory estimate of a 7B model must not
// allocate one), from the same options: the feed-forward of options.feed_forward, and a whole
// TransformerBlock (its two norms of options.norm; a make_norm or make_feed_forward module is
// not known here). Doubles: absurd sizes must not wrap.
double feed_forward_parameter_count(const TransformerBlockOptions& options);
double transformer_block_parameter_count(const TransformerBlockOptions& options);

}  // namespace wf::nn

#pragma once
// DecoderLM: the decoder-only language model that GPT and LLaMA (and a user's family built from
// the same blocks) are configurations of:
//
//   token embedding (+ learned position embedding, unless positions are RoPE)
//   → n_layer blocks: pre-norm nn::TransformerBlocks (causal self-attention, MHA or GQA, through
//     the model's attention strategy; GELU MLP or SwiGLU; LayerNorm or RMSNorm), or the family's
//     own nn::SequenceBlock (options.block)
//   → final norm → LM head (tied to the token embedding unless tie_embeddings is false)
//
// Parameter names are nn::Module's dotted paths ("blocks.0.attn.qkv.weight"), which the
// safetensors checkpoints and the PyTorch references (tests/reference/) use too. A stage
// (options.stage) holds a contiguous part of the model under the whole model's names and seeds.
// Every weight-holding layer comes from options.layers (nn::LayerFactory).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/models/model.h"
#include "wallfacer/nn/nn.h"

namespace wf::models {

enum class DecoderPositions { learned, rope };

// The block a decoder stacks: how to build one from the options the decoder derives for it
// (decoder_block_options: sizes, norm, rope, dropout, init, its seed, the layer factory, the
// attention-output checkpoint), and how many parameters one holds, counted from the same options
// without building it (validate's estimate of a 7B model must not allocate one). A family's block
// built from nn parts through options.layers keeps tp, pp, sp and the checkpoint
// (docs/adding-a-model.md). Empty: nn::TransformerBlock, nn::transformer_block_parameter_count.
struct DecoderBlock {
  std::function<std::shared_ptr<nn::SequenceBlock>(const nn::TransformerBlockOptions&)> build;
  std::function<double(const nn::TransformerBlockOptions&)> parameters;
};

struct DecoderOptions {
  std::int64_t vocab_size = 256;
  std::int64_t max_seq_len = 1024;
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t n_kv_head = 0;  // 0 → n_head
  std::int64_t d_model = 256;
  std::int64_t d_ff = 0;  // 0 → 4·d_model
  nn::NormType norm = nn::NormType::layer_norm;
  DecoderPositions positions = DecoderPositions::learned;
  double rope_theta = 10000.0;
  bool tie_embeddings = true;
  double dropout = 0.0;
  bool bias = true;
  // Activation checkpoint at every block's attention output (WallFacer §4.6): a block keeps its
  // input, attention output and lse; the rest is recomputed in the backward, attention never.
  bool checkpoint_attention = false;
  double init_std = 0.02;
  std::uint64_t seed = 0;
  double norm_eps = 1e-5;
  nn::FeedForwardKind feed_forward = nn::FeedForwardKind::mlp;
  // GPT-2 scales the init of each block's two residual projections by 1/√(2·n_layer) so the
  // residual stream's variance does not grow with depth; LLaMA does not.
  bool scale_residual_init = true;
  StageRange stage = {};
  std::shared_ptr<const nn::LayerFactory> layers = nullptr;  // null: the plain layers
  DecoderBlock block = {};  // empty: nn::TransformerBlock
  // Rows per chunk of the fused head + cross-entropy (LayerFactory::head_loss_sum; unused under
  // tp): 0 takes linear_cross_entropy_chunk_rows(vocab_size), ~256 MiB of f32 logits a chunk.
  std::int64_t loss_chunk_rows = 0;
};

// n_kv_head and d_ff with their 0 defaults resolved, the stage's open block ranges too.
DecoderOptions resolved(DecoderOptions options);
// The options of a block of this decoder, built with `seed` (DecoderLM passes each block's own).
nn::TransformerBlockOptions decoder_block_options(const DecoderOptions& options, std::uint64_t seed = 0);

// Counts of a decoder without building it, from the same options: the config summary,
// `validate`'s memory estimate and the FLOP/s the trainer reports all use these.
double decoder_parameter_count(const DecoderOptions& options);  // whole model (exact below 2^53)
double decoder_train_flops_per_token(const DecoderOptions& options, std::int64_t seq_len);
double decoder_activation_bytes_per_token(const DecoderOptions& options);
// Of it, the head's logits and their gradient per token (what tensor parallelism splits); at
// tp = 1 the loss runs in chunks of rows instead, whose fixed working set is
// decoder_fused_head_bytes (config::ModelFacts says how validate uses them).
double decoder_head_logits_bytes_per_token(const DecoderOptions& options);
double decoder_fused_head_bytes(const DecoderOptions& options);
// The part of it that tensor parallelism does not split (config::ModelFacts).
double decoder_activation_bytes_per_token_tp_replicated(const DecoderOptions& options);
std::string decoder_description(const DecoderOptions& options);  // "4 layers, d_model 256, 4 heads (2 kv)"

// The rules a decoder's options must satisfy, against the layout too (heads over tp and the
// Ulysses degree, d_ff over tp, rope's even head dimension), as "model.key: rule" lines.
void check_decoder(const DecoderOptions& options, const config::RunConfig& config, std::vector<std::string>& problems);

// The config schema of a model that is a DecoderLM: `keys`, check_decoder as its rules and the
// decoder_* counts as its facts, on the DecoderOptions `options_of` reads from a run config.
config::ModelSchema decoder_schema(std::string name, std::vector<config::ModelKey> keys,
                                   std::function<DecoderOptions(const config::RunConfig&)> options_of);

// The `model:` keys every decoder family shares, bound to the members of the same names of its
// options struct (GptOptions, LlamaOptions, a user's): sizes, rope_theta, norm_eps, the head,
// dropout, the checkpoint and the init. A family adds its own choices after them.
template <class Options>
config::ModelKeys<Options>& add_decoder_keys(config::ModelKeys<Options>& keys) {
  // Sizes are bounded only where arithmetic on them could overflow before validate's memory
  // estimate (in doubles) refuses them; absurd layer counts, widths and vocabularies get that
  // estimate instead of a range error.
  constexpr std::int64_t kMaxHeads = std::int64_t{1} << 20, kMaxWidth = std::int64_t{1} << 50;
  return keys.integer("n_layer", &Options::n_layer, 1)
      .integer("n_head", &Options::n_head, 1, kMaxHeads)
      .integer("n_kv_head", &Options::n_kv_head, 0, kMaxHeads)  // 0: n_head
      .integer("d_model", &Options::d_model, 1, kMaxWidth)
      .integer("d_ff", &Options::d_ff, 0)  // 0: 4·d_model
      .integer("vocab_size", &Options::vocab_size, 1)
      .integer("max_seq_len", &Options::max_seq_len, 1)
      .number("rope_theta", &Options::rope_theta, 0.0, false)
      .number("norm_eps", &Options::norm_eps, 0.0, false)
      .boolean("tie_embeddings", &Options::tie_embeddings)
      .number("dropout", &Options::dropout, 0.0, true, 1.0, false)
      .boolean("checkpoint_attention", &Options::checkpoint_attention)
      .number("init_std", &Options::init_std, 0.0, false);
}

// A family's options from a run config: its keys read from config.model, seeded with train.seed.
template <class Options>
Options options_from_config(const config::ModelKeys<Options>& keys, const config::RunConfig& config) {
  Options options = keys.read(config.model);
  options.seed = static_cast<std::uint64_t>(config.train.seed);
  return options;
}

// A DecoderLM factory's layout part: the layers of the run's tensor parallelism and the part of
// the model this rank's pipeline stage holds (pipeline_stage).
void place_on_grid(DecoderOptions& options, const config::RunConfig& config, comm::CommGrid& grid);

// A DecoderLM factory's common part: with sp > 1 the run's sequence-parallel attention strategy.
std::shared_ptr<Model> with_sp_attention(std::shared_ptr<Model> model, const config::RunConfig& config,
                                         comm::CommGrid& grid);

class DecoderLM : public Model {
 public:
  DecoderLM(std::string name, const DecoderOptions& options);

  // ids [B, n] (i64) with positions [n] (i64, each < max_seq_len: the true position of every
  // token, which under sequence parallelism is not 0..n−1) → logits [B, n, vocab_size]. Packed
  // documents: where.positions [B, n] (each token's position inside its document) and
  // where.documents (each row's bounds), which attention keeps apart.
  Tensor forward(const Tensor& ids, const nn::TokenPositions& where);
  // The same for a whole sequence starting at position 0 (single process, generation).
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of forward(ids) against targets [B, n] (i64): a 0-dim tensor.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  std::string name() const override { return name_; }
  LossSum loss_sum(const Batch& batch) override;
  double train_flops_per_token(std::int64_t seq_len) const override;
  bool causal() const override { return true; }
  bool has_logits() const override { return options_.stage.whole(options_.n_layer); }
  // A stage without the whole model has none (Model::logits says so).
  Tensor logits(const Tensor& ids, const Tensor& positions) override {
    return has_logits() ? forward(ids, positions) : Model::logits(ids, positions);
  }
  std::int64_t vocab_size() const override { return options_.vocab_size; }
  std::int64_t max_context() const override { return options_.max_seq_len; }
  StageRange stage() const override { return options_.stage; }
  StageOutput forward_stage(const Batch& batch, const Tensor& hidden, int chunk = 0) override;
  std::pair<Shape, DType> stage_hidden(const Batch& batch) const override;
  std::vector<std::string> pipeline_shared_parameters() const override;

  const DecoderOptions& options() const { return options_; }
  // Blocks this instance holds, in order (a stage's: its range).
  std::size_t num_blocks() const { return blocks_.size(); }
  nn::SequenceBlock& block(std::size_t i);
  // The same as the nn::TransformerBlock it is unless the family builds its own (wf::Error then).
  nn::TransformerBlock& transformer_block(std::size_t i);
  nn::Embedding& token_embedding();

 private:
  Tensor embed(const Tensor& ids, const Tensor& positions);
  Tensor run_blocks(Tensor x, const nn::TokenPositions& where, int chunk = 0);
  // The final norm's output h → the vocabulary logits in the masters' dtype (the unfused head).
  Tensor head_logits(const Tensor& h);
  // The head as the factory's head_loss_sum reads it.
  nn::VocabularyHead vocabulary_head();
  void check_inputs(const Tensor& ids, const Tensor& positions) const;

  std::string name_;
  DecoderOptions options_;
  std::shared_ptr<nn::Embedding> token_embedding_;     // on the first stage, and on the last when tied
  std::shared_ptr<nn::Embedding> position_embedding_;  // first stage, learned positions only
  std::vector<std::shared_ptr<nn::SequenceBlock>> blocks_;  // every chunk's, in order
  std::vector<std::size_t> chunk_begin_;  // chunk c's blocks are blocks_[chunk_begin_[c], chunk_begin_[c + 1])
  std::shared_ptr<nn::Normalization> final_norm_;  // last stage
  std::shared_ptr<nn::Linear> lm_head_;            // last stage, untied only
};

}  // namespace wf::models

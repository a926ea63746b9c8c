#include "wallfacer/models/decoder.h"

#include <cmath>

#include "wallfacer/ops/ops.h"
#include "wallfacer/parallel/ulysses_heads.h"

namespace wf::models {
namespace {

// Elements of a [rows, cols] matmul weight: 2·rows·cols FLOPs per token forward, 3× that with
// the backward (input and weight gradients).
double matmul_train_flops(double rows, double cols) { return 6.0 * rows * cols; }

// The feed-forward's weight matrices of d_model × d_ff each: 2 for the MLP, 3 for SwiGLU.
double feed_forward_matrices(const DecoderOptions& o) { return o.feed_forward == nn::FeedForwardKind::swiglu ? 3 : 2; }

}  // namespace

DecoderOptions resolved(DecoderOptions o) {
  if (o.n_kv_head == 0) o.n_kv_head = o.n_head;
  if (o.d_ff == 0) o.d_ff = 4 * o.d_model;
  for (BlockRange& chunk : o.stage.chunks) {
    if (chunk.end < 0) chunk.end = o.n_layer;
  }
  return o;
}

nn::TransformerBlockOptions decoder_block_options(const DecoderOptions& options, std::uint64_t seed) {
  const DecoderOptions o = resolved(options);
  const double out_std = o.scale_residual_init ? o.init_std / std::sqrt(2.0 * static_cast<double>(o.n_layer)) : 0.0;
  return {.d_model = o.d_model,
          .n_head = o.n_head,
          .n_kv_head = o.n_kv_head,
          .d_ff = o.d_ff,
          .activation = nn::Activation::gelu,
          .norm = o.norm,
          .norm_eps = o.norm_eps,
          .causal = true,
          .dropout = o.dropout,
          .bias = o.bias,
          .init_std = o.init_std,
          .out_init_std = out_std,
          .rope = o.positions == DecoderPositions::rope,
          .rope_theta = o.rope_theta,
          .checkpoint_attention = o.checkpoint_attention,
          .seed = seed,
          .feed_forward = o.feed_forward,
          .layers = o.layers};
}

double decoder_parameter_count(const DecoderOptions& options) {
  const DecoderOptions o = resolved(options);
  // Doubles: absurd configs reach validate, which must not see a wrapped count. The blocks count
  // themselves (the family's own block its own way); the rest is the embeddings and final norm.
  const nn::TransformerBlockOptions b = decoder_block_options(o);
  const double block = o.block.parameters ? o.block.parameters(b) : nn::transformer_block_parameter_count(b);
  const double d = static_cast<double>(o.d_model);
  double total = static_cast<double>(o.vocab_size) * d + static_cast<double>(o.n_layer) * block +
                 nn::norm_parameter_count(o.norm, o.d_model);
  if (o.positions == DecoderPositions::learned) total += static_cast<double>(o.max_seq_len) * d;
  if (!o.tie_embeddings) total += static_cast<double>(o.vocab_size) * d;
  return total;
}

double decoder_train_flops_per_token(const DecoderOptions& options, std::int64_t seq_len) {
  const DecoderOptions o = resolved(options);
  const double d = static_cast<double>(o.d_model), head_dim = d / static_cast<double>(o.n_head);
  const double per_layer = matmul_train_flops(d, static_cast<double>(o.n_head + 2 * o.n_kv_head) * head_dim) +  // qkv
                           matmul_train_flops(d, d) +                                                          // proj
                           feed_forward_matrices(o) * matmul_train_flops(d, static_cast<double>(o.d_ff));
  // Attention: QKᵀ and PV cost 2·2·d per (query, key) pair forward, 3× with the backward; a
  // causal query sees (seq_len + 1) / 2 keys on average.
  const double keys_per_query = static_cast<double>(seq_len + 1) / 2.0;
  const double attention = 12.0 * d * keys_per_query;
  const double head = matmul_train_flops(d, static_cast<double>(o.vocab_size));
  return static_cast<double>(o.n_layer) * (per_layer + attention) + head;
}

double decoder_activation_bytes_per_token(const DecoderOptions& options) {
  const DecoderOptions o = resolved(options);
  const double d = static_cast<double>(o.d_model), ff = static_cast<double>(o.d_ff);
  const double qkv = static_cast<double>(o.n_head + 2 * o.n_kv_head) * (d / static_cast<double>(o.n_head));
  // f32 values a block keeps for its backward: with the checkpoint at the attention output its
  // input, attention output and lse; otherwise the norms' inputs and outputs, q/k/v, the
  // attention output, the projection, and the feed-forward's hidden activations.
  const double per_layer = o.checkpoint_attention
                               ? 2 * d + static_cast<double>(o.n_head)
                               : 6 * d + qkv + (feed_forward_matrices(o) + 1) * ff;
  // The logits and their gradient (the fused loss keeps no probabilities, the graph the logits):
  // the tensor-parallel head's; at tp = 1 the head runs in chunks (decoder_fused_head_bytes).
  return 4.0 * (static_cast<double>(o.n_layer) * per_layer + 2 * d) + decoder_head_logits_bytes_per_token(o);
}

double decoder_head_logits_bytes_per_token(const DecoderOptions& options) {
  return 4.0 * 2 * static_cast<double>(resolved(options).vocab_size);
}

double decoder_fused_head_bytes(const DecoderOptions& options) {
  const DecoderOptions o = resolved(options);
  const double V = static_cast<double>(o.vocab_size);
  const double rows = static_cast<double>(o.loss_chunk_rows > 0 ? o.loss_chunk_rows : linear_cross_entropy_chunk_rows(o.vocab_size));
  // One chunk's logits as the product gives them, their f32 cast and their gradient, and the f32
  // gradient of W [V, d] it accumulates over the chunks.
  return 4.0 * (3 * rows * V + V * static_cast<double>(o.d_model));
}

double decoder_activation_bytes_per_token_tp_replicated(const DecoderOptions& options) {
  const DecoderOptions o = resolved(options);
  const double d = static_cast<double>(o.d_model);
  // The d_model-wide values above: with the checkpoint the block's input and attention output,
  // otherwise the norms' inputs and outputs, the projection and the residuals; and the embedding.
  const double per_layer = o.checkpoint_attention ? 2 * d : 6 * d;
  return 4.0 * (static_cast<double>(o.n_layer) * per_layer + 2 * d);
}

std::string decoder_description(const DecoderOptions& options) {
  const DecoderOptions o = resolved(options);
  return fmt::format("{} layers, d_model {}, {} heads ({} kv), d_ff {} {}", o.n_layer, o.d_model, o.n_head,
                     o.n_kv_head, o.d_ff, nn::feed_forward_name(o.feed_forward));
}

void check_decoder(const DecoderOptions& options, const config::RunConfig& c, std::vector<std::string>& problems) {
  const DecoderOptions m = resolved(options);
  const config::ParallelSection& p = c.parallel;
  const auto require = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  require(m.n_kv_head <= m.n_head && m.n_head % m.n_kv_head == 0,
          fmt::format("model.n_kv_head: n_head = {} is not a multiple of n_kv_head = {}: each kv head must serve "
                      "the same number of query heads",
                      m.n_head, m.n_kv_head));
  require(m.d_model % m.n_head == 0,
          fmt::format("model.d_model: d_model = {} is not a multiple of n_head = {}: every head needs the same "
                      "head dimension",
                      m.d_model, m.n_head));
  if (m.positions == DecoderPositions::rope && m.d_model % m.n_head == 0) {
    require((m.d_model / m.n_head) % 2 == 0,
            fmt::format("model.positions: rope rotates pairs of channels, but the head dimension d_model / n_head "
                        "= {} is odd",
                        m.d_model / m.n_head));
  }
  // Tensor parallelism (Megatron): each tp rank holds whole query and kv heads and d_ff / tp
  // feed-forward units. The vocabulary is no rule: a vocabulary tp does not divide is padded.
  const auto require_split = [&](std::string problem) {
    if (!problem.empty()) problems.push_back(std::move(problem));
  };
  require_split(config::tp_split_problem(c, "n_head", m.n_head, "whole query heads"));
  require_split(config::tp_split_problem(
      c, "n_kv_head", m.n_kv_head, "whole kv heads",
      m.n_kv_head < p.tp ? " (fewer kv heads than tp ranks: kv heads are split over tp, never replicated)" : ""));
  require_split(config::tp_split_problem(c, "d_ff", m.d_ff,
                                         m.feed_forward == nn::FeedForwardKind::swiglu
                                             ? "the SwiGLU feed-forward's d_ff units (gate and up columns, down rows)"
                                             : "the MLP feed-forward's d_ff units (up columns, down rows)"));
  if (p.ulysses_degree() > 1 && m.n_head % p.tp == 0 && m.n_kv_head % p.tp == 0 && m.n_head % m.n_kv_head == 0) {
    // Ulysses (or the hybrid's Ulysses part) scatters each tp rank's heads over its ranks (kv
    // heads replicated when there are fewer).
    const std::int64_t heads = m.n_head / p.tp, kv_heads = m.n_kv_head / p.tp;
    const std::string problem = parallel::ulysses_heads_problem(heads, kv_heads, p.ulysses_degree());
    require(problem.empty(),
            fmt::format("model.n_head: {} scatters the heads of each tp rank, "
                        "n_head / parallel.tp = {} / {} = {} query heads and n_kv_head / parallel.tp = {} / {} = {} kv "
                        "heads (h and h_kv below; n_head and n_kv_head are tp times them): {}",
                        p.ulysses_degree_text(), m.n_head, p.tp, heads, m.n_kv_head, p.tp, kv_heads, problem));
  }
}

config::ModelSchema decoder_schema(std::string name, std::vector<config::ModelKey> keys,
                                   std::function<DecoderOptions(const config::RunConfig&)> options_of) {
  config::ModelSchema schema;
  schema.name = std::move(name);
  schema.keys = std::move(keys);
  schema.validate = [options_of](const config::RunConfig& c, std::vector<std::string>& problems) {
    check_decoder(options_of(c), c, problems);
  };
  schema.facts = [options_of](const config::RunConfig& c) {
    const DecoderOptions o = resolved(options_of(c));
    config::ModelFacts facts;
    facts.description = decoder_description(o);
    facts.parameters = decoder_parameter_count(o);
    facts.train_flops_per_token = decoder_train_flops_per_token(o, c.train.seq_len);
    facts.causal = true;
    facts.vocab_size = o.vocab_size;
    facts.max_seq_len = o.max_seq_len;
    facts.n_layer = o.n_layer;
    facts.activation_bytes_per_token = decoder_activation_bytes_per_token(o);
    facts.activation_bytes_per_token_tp_replicated = decoder_activation_bytes_per_token_tp_replicated(o);
    facts.head_logits_bytes_per_token = decoder_head_logits_bytes_per_token(o);
    facts.fused_head_bytes_per_token = 4.0 * static_cast<double>(o.d_model);  // the f32 dh
    facts.fused_head_bytes = decoder_fused_head_bytes(o);
    facts.blocks = {.n_layer = o.n_layer, .n_head = o.n_head, .n_kv_head = o.n_kv_head, .d_model = o.d_model,
                    .d_ff = o.d_ff, .feed_forward_matrices = static_cast<int>(feed_forward_matrices(o)),
                    .checkpoint_attention = o.checkpoint_attention, .head_width = o.vocab_size};
    return facts;
  };
  return schema;
}

std::shared_ptr<Model> with_sp_attention(std::shared_ptr<Model> model, const config::RunConfig& config,
                                         comm::CommGrid& grid) {
  install_sp_attention(*model, config, grid);
  return model;
}

DecoderLM::DecoderLM(std::string name, const DecoderOptions& options)
    : Model(options.seed), name_(std::move(name)), options_(resolved(options)) {
  const auto& o = options_;
  WF_CHECK(o.vocab_size > 0 && o.max_seq_len > 0 && o.n_layer > 0 && o.d_model > 0 && o.n_head > 0,
           "{}: vocab_size, max_seq_len, n_layer, d_model and n_head must be positive, got {}, {}, {}, {}, {}", name_,
           o.vocab_size, o.max_seq_len, o.n_layer, o.d_model, o.n_head);
  const StageRange& s = o.stage;
  WF_CHECK(!s.chunks.empty(), "{}: a stage holds at least one model chunk", name_);
  for (std::size_t c = 0; c < s.chunks.size(); ++c) {
    const BlockRange& r = s.chunks[c];
    WF_CHECK(0 <= r.first && r.first <= r.end && r.end <= o.n_layer && (c == 0 || s.chunks[c - 1].end <= r.first),
             "{}: the stage's chunk {} of blocks [{}, {}) is not inside the model's {} blocks after the chunks before "
             "it", name_, c, r.first, r.end, o.n_layer);
  }
  const nn::LayerFactory& layers = nn::layers_or_default(o.layers);
  // The tied head reads the token embedding: a last stage without the embedding holds its own
  // copy, under the same name and seed. The trainer keeps the two copies in step by summing their
  // gradients over the grid's pp.embedding group (pipeline_shared_parameters).
  if (s.embedding || (s.head && o.tie_embeddings)) {
    token_embedding_ = register_module(
        "token_embedding",
        layers.embedding(nn::EmbeddingOptions{.num_embeddings = o.vocab_size, .dim = o.d_model,
                                              .init_std = o.init_std, .seed = child_seed("token_embedding")},
                         nn::EmbeddingRole::vocabulary));
  }
  if (s.embedding && o.positions == DecoderPositions::learned) {
    position_embedding_ = register_module(
        "position_embedding",
        layers.embedding(nn::EmbeddingOptions{.num_embeddings = o.max_seq_len, .dim = o.d_model,
                                              .init_std = o.init_std, .seed = child_seed("position_embedding")},
                         nn::EmbeddingRole::replicated));
  }
  auto blocks = register_module("blocks", std::make_shared<nn::ModuleList>(child_seed("blocks")));
  for (const BlockRange& chunk : s.chunks) {
    chunk_begin_.push_back(blocks_.size());
    for (std::int64_t i = chunk.first; i < chunk.end; ++i) {
      const nn::TransformerBlockOptions b = decoder_block_options(o, blocks->seed_at(i));
      std::shared_ptr<nn::SequenceBlock> block =
          o.block.build ? o.block.build(b) : std::make_shared<nn::TransformerBlock>(b);
      WF_CHECK(block != nullptr, "{}: the family's block builder returned no block for block {}", name_, i);
      blocks_.push_back(blocks->place(i, std::move(block)));
    }
  }
  chunk_begin_.push_back(blocks_.size());
  if (s.head) {
    final_norm_ = register_module("final_norm", layers.norm(o.norm, o.d_model, o.norm_eps));
    if (!o.tie_embeddings) {
      lm_head_ = register_module(
          "lm_head", layers.linear(nn::LinearOptions{.in_features = o.d_model, .out_features = o.vocab_size,
                                                     .bias = false, .init_std = o.init_std, .seed = child_seed("lm_head")},
                                   nn::LinearRole::vocabulary));
    }
  }
}

void DecoderLM::check_inputs(const Tensor& ids, const Tensor& positions) const {
  WF_CHECK(ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
           "{}: ids must be [batch, tokens] of i64 or i32, got {} {}", name_, dtype_name(ids.dtype()),
           shape_str(ids.shape()));
  const bool shared = positions.dim() == 1 && positions.size(0) == ids.size(1);
  const bool per_row = positions.dim() == 2 && positions.size(0) == ids.size(0) && positions.size(1) == ids.size(1);
  WF_CHECK((shared || per_row) && positions.dtype() == DType::i64,
           "{}: positions must be [tokens] i64 with tokens = {} (the ids' second dim), or per row [batch, tokens] = "
           "[{}, {}] (packed documents), got {} {}",
           name_, ids.size(1), ids.size(0), ids.size(1), dtype_name(positions.dtype()), shape_str(positions.shape()));
  // Positions on a device are not read back here (that would be a host synchronisation inside the
  // step): the batch source built them on the host from train.seq_len, which validation keeps within
  // max_seq_len, and a learned position table's kernel still refuses a row outside it. Host positions
  // (every direct caller) are checked here, with the fix named.
  if (!positions.device().is_cpu()) return;
  const std::int64_t* p = positions.data<std::int64_t>();
  for (std::int64_t i = 0; i < positions.numel(); ++i) {
    WF_CHECK(p[i] >= 0 && p[i] < options_.max_seq_len,
             "{}: position {} is outside [0, max_seq_len = {}); raise model.max_seq_len or shorten train.seq_len",
             name_, p[i], options_.max_seq_len);
  }
}

Tensor DecoderLM::embed(const Tensor& ids, const Tensor& positions) {
  check_inputs(ids, positions);
  Tensor x = token_embedding_->forward(ids);  // [B, n, d]
  // [B, n, d] + [n, d], broadcast over the batch (or + [B, n, d] with per-row positions).
  if (position_embedding_) x = add(x, position_embedding_->forward(positions));
  // With tp activation sharding the blocks see this rank's slice of the tokens (the vocabulary
  // head gathers them back); the identity otherwise.
  return nn::layers_or_default(options_.layers).shard_activations(x);
}

Tensor DecoderLM::run_blocks(Tensor x, const nn::TokenPositions& where, int chunk) {
  for (std::size_t i = chunk_begin_[static_cast<std::size_t>(chunk)]; i < chunk_begin_[static_cast<std::size_t>(chunk) + 1]; ++i) {
    x = blocks_[i]->forward(x, where);
  }
  return x;
}

nn::VocabularyHead DecoderLM::vocabulary_head() {
  return {.weight = lm_head_ ? lm_head_->weight() : token_embedding_->weight(),
          .logits = [this](const Tensor& h) { return head_logits(h); },
          .chunk_rows = options_.loss_chunk_rows};
}

Tensor DecoderLM::head_logits(const Tensor& h) {
  // Vocabulary logits: split over the vocabulary under tensor parallelism (the factory reads them).
  const Tensor logits = lm_head_ ? lm_head_->forward(h) : token_embedding_->attend(h);
  // The loss and its softmax see the logits in the masters' dtype (nn/precision.h): from bf16
  // logits the loss itself would come out rounded to bf16's 3 digits.
  const DType master = (lm_head_ ? lm_head_->weight() : token_embedding_->weight()).dtype();
  return logits.dtype() == master ? logits : cast(logits, master);
}

Tensor DecoderLM::forward(const Tensor& ids, const nn::TokenPositions& where) {
  WF_CHECK(options_.stage.whole(options_.n_layer), "{}: forward needs the whole model; this instance is a stage (use forward_stage)",
           name_);
  return nn::layers_or_default(options_.layers)
      .vocabulary_logits(head_logits(final_norm_->forward(run_blocks(embed(ids, where.positions), where))),
                         options_.vocab_size);
}

Tensor DecoderLM::forward(const Tensor& ids) {
  WF_CHECK(ids.dim() == 2, "{}: ids must be [batch, tokens], got {}", name_, shape_str(ids.shape()));
  return forward(ids, Tensor::arange(0.0, static_cast<double>(ids.size(1)), 1.0, DType::i64).to(ids.device()));
}

Tensor DecoderLM::loss(const Tensor& ids, const Tensor& targets) {
  WF_CHECK(targets.shape() == ids.shape(), "{}: targets {} must have the shape of ids {}", name_,
           shape_str(targets.shape()), shape_str(ids.shape()));
  return cross_entropy(forward(ids), targets);
}

StageOutput DecoderLM::forward_stage(const Batch& batch, const Tensor& hidden, int chunk) {
  const StageRange& stage = options_.stage;
  WF_CHECK(chunk >= 0 && chunk < stage.num_chunks(), "{}: this stage holds model chunks 0..{}, not {}", name_,
           stage.num_chunks() - 1, chunk);
  // Every stage reads the positions and documents of the same batch.
  const nn::TokenPositions where = token_positions(batch);
  const bool first = stage.embedding && chunk == 0, last = stage.head && chunk + 1 == stage.num_chunks();
  Tensor x;
  if (first) {
    x = embed(batch.at("tokens"), where.positions);
  } else {
    const BlockRange& blocks = stage.chunks[static_cast<std::size_t>(chunk)];
    WF_CHECK(hidden.defined() && hidden.dim() == 3 && hidden.size(2) == options_.d_model,
             "{}: the chunk of blocks [{}, {}) continues from hidden states [batch, tokens, {}], got {}", name_,
             blocks.first, blocks.end, options_.d_model, hidden.defined() ? shape_str(hidden.shape()) : "none");
    x = hidden;
  }
  x = run_blocks(std::move(x), where, chunk);
  if (!last) return {x, {}};
  const Tensor& targets = batch.at("targets");
  const nn::LayerFactory& layers = nn::layers_or_default(options_.layers);
  // The head gathers the tokens activation sharding split: it predicts all of this rank's.
  const std::int64_t tokens = x.size(1) * layers.activation_token_parts();
  WF_CHECK(targets.dim() == 2 && targets.size(0) == x.size(0) && targets.size(1) == tokens,
           "{}: targets {} must be [batch, tokens] = [{}, {}]", name_, shape_str(targets.shape()), x.size(0), tokens);
  // The factory decides how the head's loss is taken: the fused chunks of linear_cross_entropy_sum
  // by default, never holding the [tokens, vocab] logits; tp's split logits and vocabulary-parallel loss.
  const Tensor loss = layers.head_loss_sum(final_norm_->forward(x), vocabulary_head(), targets, options_.vocab_size);
  return {Tensor(), LossSum{loss, count_targets_device(targets)}};
}

std::pair<Shape, DType> DecoderLM::stage_hidden(const Batch& batch) const {
  // The residual stream: [batch, this rank's tokens (1/tp of them with activation sharding), d_model].
  const Tensor& positions = batch.at("positions");
  const std::int64_t parts = nn::layers_or_default(options_.layers).activation_token_parts();
  const std::int64_t sequences = batch.contains("tokens") ? batch.at("tokens").size(0) : batch.at("targets").size(0);
  // Positions are [tokens], or [batch, tokens] with packed documents.
  const std::int64_t tokens = positions.size(positions.dim() - 1);
  return {{sequences, tokens / parts, options_.d_model}, compute_dtype(parameters().front().dtype())};
}

std::vector<std::string> DecoderLM::pipeline_shared_parameters() const {
  const StageRange& stage = options_.stage;
  // The tied embedding lives on the first stage and, as a copy, on the last: apart, they are one
  // parameter. A whole model (both ends on one rank) holds it once.
  if (!options_.tie_embeddings || stage.embedding == stage.head) return {};
  return {"token_embedding.weight"};
}

void place_on_grid(DecoderOptions& options, const config::RunConfig& config, comm::CommGrid& grid) {
  options.layers = tensor_parallel_layers(config, grid);
  options.stage = pipeline_stage(config, grid.grid());
}

LossSum DecoderLM::loss_sum(const Batch& batch) {
  WF_CHECK(options_.stage.whole(options_.n_layer), "{}: loss_sum needs the whole model; this instance is a stage (use forward_stage)",
           name_);
  return forward_stage(batch, Tensor()).loss;
}

double DecoderLM::train_flops_per_token(std::int64_t seq_len) const {
  return decoder_train_flops_per_token(options_, seq_len);
}

nn::SequenceBlock& DecoderLM::block(std::size_t i) {
  WF_CHECK(i < blocks_.size(), "{}: block {} out of range ({} blocks)", name_, i, blocks_.size());
  return *blocks_[i];
}

nn::TransformerBlock& DecoderLM::transformer_block(std::size_t i) {
  auto* transformer = dynamic_cast<nn::TransformerBlock*>(&block(i));
  WF_CHECK(transformer != nullptr, "{}: block {} is the family's own, not an nn::TransformerBlock (use block())",
           name_, i);
  return *transformer;
}

nn::Embedding& DecoderLM::token_embedding() {
  WF_CHECK(token_embedding_ != nullptr, "{}: this stage holds no token embedding", name_);
  return *token_embedding_;
}

}  // namespace wf::models

#include "wallfacer/nn/self_attention.h"

#include "wallfacer/ops/rope.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf::nn {

SelfAttention::SelfAttention(const SelfAttentionOptions& options)
    : Module(options.seed), options_(options), strategy_(std::make_shared<LocalAttention>()) {
  if (options_.n_kv_head == 0) options_.n_kv_head = options_.n_head;
  const std::int64_t d = options_.d_model, h = options_.n_head, h_kv = options_.n_kv_head;
  WF_CHECK(d > 0 && h > 0 && h_kv > 0, "SelfAttention: d_model, n_head and n_kv_head must be positive, got {}, {}, {}",
           d, h, h_kv);
  WF_CHECK(d % h == 0, "SelfAttention: d_model {} is not divisible by n_head {}", d, h);
  WF_CHECK(h % h_kv == 0, "SelfAttention: n_kv_head {} must divide n_head {} (grouped-query attention)", h_kv, h);
  WF_CHECK(!options_.rope || head_dim() % 2 == 0,
           "SelfAttention: rope rotates channel pairs, so head_dim = d_model / n_head must be even, got {} / {} = {}", d,
           h, head_dim());
  const std::int64_t qkv_width = (h + 2 * h_kv) * head_dim();
  const double out_std = options.out_init_std > 0 ? options.out_init_std : options.init_std;
  const LayerFactory& layers = layers_or_default(options.layers);
  tp_ = layers.tensor_parallel_size();
  WF_CHECK(tp_ >= 1 && h_kv % tp_ == 0,
           "SelfAttention: tensor parallelism splits whole kv-head groups over tp = {}, but n_kv_head = {} is not a "
           "multiple of it; use a tp that divides n_kv_head",
           tp_, h_kv);
  qkv_ = register_module("qkv", layers.linear(LinearOptions{.in_features = d,
                                                            .out_features = qkv_width,
                                                            .bias = options.bias,
                                                            .init_std = options.init_std,
                                                            .weight_init = options.weight_init,
                                                            .seed = child_seed("qkv")},
                                              LinearRole::column));
  proj_ = register_module("proj", layers.linear(LinearOptions{.in_features = d,
                                                              .out_features = d,
                                                              .bias = options.bias,
                                                              .init_std = out_std,
                                                              .weight_init = options.weight_init,
                                                              .seed = child_seed("proj")},
                                                LinearRole::row));
  dropout_ = register_module("dropout", layers.dropout(options.dropout, ActivationRegion::replicated));
  // The factory must split qkv by rows and proj by columns tp ways, or not at all.
  WF_CHECK(qkv_->weight().size(0) * tp_ == qkv_width && proj_->weight().size(1) * tp_ == d,
           "SelfAttention: the layer factory says tp = {} but gave qkv [{}] and proj [{}]; expected [{}, {}] and "
           "[{}, {}]",
           tp_, fmt::join(qkv_->weight().shape(), ", "), fmt::join(proj_->weight().shape(), ", "), qkv_width / tp_, d,
           d, d / tp_);
}

Tensor SelfAttention::forward(const Tensor& x, std::int64_t position_offset) {
  WF_CHECK(position_offset >= 0, "SelfAttention: position_offset must be >= 0, got {}", position_offset);
  const Tensor positions =
      x.defined() && x.dim() >= 2 ? contiguous_positions(position_offset, x.size(1), x.device()) : Tensor();
  return run(x, positions, attention_options(position_offset));
}

Tensor SelfAttention::forward(const Tensor& x, const TokenPositions& where) {
  WF_CHECK(where.positions.defined(), "SelfAttention: positions are undefined; pass [tokens] global positions (i64) "
           "or use forward(x, position_offset)");
  return run(x, where.positions, attention_options(where));
}

Tensor SelfAttention::run(const Tensor& x, const Tensor& positions, const AttentionOptions& attention_options) {
  const Heads heads = project(x, positions);
  return output(strategy_->forward(heads.q, heads.k, heads.v, attention_options).out);
}

SelfAttention::Heads SelfAttention::project(const Tensor& x, const Tensor& positions) {
  const std::int64_t h = options_.n_head, h_kv = options_.n_kv_head, hd = head_dim();
  WF_CHECK(x.defined() && x.dim() == 3 && x.size(2) == options_.d_model,
           "SelfAttention(d_model={}): input must be [batch, tokens, {}], got {}", options_.d_model,
           options_.d_model, x.defined() ? shape_str(x.shape()) : "undefined");
  // With activation sharding x holds this rank's slice of the tokens and the column layer
  // gathers them all: the heads have the projection's tokens.
  const Tensor projected = qkv_->forward(x);
  const std::int64_t batch = x.size(0), tokens = projected.size(1);
  if (positions.defined()) {
    const bool shared = positions.dim() == 1 && positions.size(0) == tokens;
    const bool per_row = positions.dim() == 2 && positions.size(0) == batch && positions.size(1) == tokens;
    WF_CHECK((shared || per_row) && (positions.dtype() == DType::i64 || positions.dtype() == DType::i32),
             "SelfAttention: positions must be [tokens] = [{}] or per row [batch, tokens] = [{}, {}] of i64 or i32 "
             "(one position per token of x {}), got {} {}",
             tokens, batch, tokens, shape_str(x.shape()), dtype_name(positions.dtype()), shape_str(positions.shape()));
  }
  WF_CHECK(!options_.rope || positions.defined(), "SelfAttention: rope is on but no positions were given");

  // [B, T, groups·(G + 2)·hd], groups = this rank's kv heads: each group's G query heads, its
  // key head and its value head, split into contiguous heads (q and k rotated) in one pass. Without
  // rope the same op is the plain split: one pass too, where narrow + reshape copied each part.
  const std::int64_t groups = local_kv_heads(), G = h / h_kv;
  const QkvHeads split =
      split_qkv_rope(projected, groups, G, hd, options_.rope ? positions : Tensor(), options_.rope_theta);
  return Heads{split.q, split.k, split.v};
}

Tensor SelfAttention::output(const Tensor& attention_out) {
  const std::int64_t batch = attention_out.size(0), tokens = attention_out.size(1);
  return dropout_->forward(proj_->forward(reshape(attention_out, {batch, tokens, options_.d_model / tp_})));
}

AttentionOptions SelfAttention::attention_options(std::int64_t position_offset) const {
  return {.causal = options_.causal, .q_offset = position_offset, .kv_offset = position_offset};
}

AttentionOptions SelfAttention::attention_options(const TokenPositions& where) const {
  AttentionOptions options = attention_options(0);
  options.doc_bounds = where.documents;
  return options;
}

Tensor SelfAttention::contiguous_positions(std::int64_t position_offset, std::int64_t tokens, Device device) const {
  if (!options_.rope) return Tensor();
  return Tensor::arange(static_cast<double>(position_offset), static_cast<double>(position_offset + tokens), 1.0,
                        DType::i64)
      .to(device);
}

void SelfAttention::set_strategy(std::shared_ptr<AttentionStrategy> strategy) {
  WF_CHECK(strategy != nullptr, "SelfAttention::set_strategy: the strategy is null");
  strategy_ = std::move(strategy);
}

double self_attention_parameter_count(const SelfAttentionOptions& o) {
  const double d = static_cast<double>(o.d_model), head_dim = d / static_cast<double>(o.n_head);
  const double kv_width = static_cast<double>(o.n_kv_head > 0 ? o.n_kv_head : o.n_head) * head_dim;
  const double qkv = d + 2 * kv_width, bias = o.bias ? 1.0 : 0.0;
  return qkv * d + bias * qkv + d * d + bias * d;
}

int set_attention_strategy(Module& root, const std::shared_ptr<AttentionStrategy>& strategy) {
  int count = 0;
  for (auto& [name, module] : root.named_modules()) {
    if (auto* attention = dynamic_cast<SelfAttention*>(module)) {
      attention->set_strategy(strategy);
      ++count;
    }
  }
  return count;
}

}  // namespace wf::nn

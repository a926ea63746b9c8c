#include "wallfacer/train/step_traffic.h"

#include <algorithm>

#include "wallfacer/core/error.h"
#include "wallfacer/models/model.h"

namespace wf::train {

std::int64_t all_reduce_bytes(std::int64_t bytes, int ranks) { return 2 * (ranks - 1) * bytes / ranks; }

std::int64_t gradient_sync_bytes(const FlatLayout& layout, int replicas, int zero, std::int64_t accum,
                                 DType reduce_dtype) {
  // A group of one makes no call at all (ReplicaGradients, sum_over), which the formulas give
  // too: (1 − 1)·S = 0. It shards nothing either.
  zero = effective_zero_stage(replicas, zero);
  // A reduce-scatter of S or an all-gather of S: (R − 1)/R·S, counted per call.
  const auto scatter = [replicas](std::int64_t bytes) { return (replicas - 1) * (bytes / replicas); };
  std::int64_t sent = 0;
  for (const auto& bucket : layout.buckets()) {
    // Gradients travel in their wire dtype, the parameters' all-gather in their own.
    const DType dtype = layout.buffers()[bucket.buffer].dtype;
    const std::int64_t bytes = bucket.numel * static_cast<std::int64_t>(dtype_size(dtype));
    const std::int64_t gradient_bytes =
        bucket.numel * static_cast<std::int64_t>(dtype_size(gradient_wire_dtype(dtype, reduce_dtype)));
    if (zero == 0) {
      sent += all_reduce_bytes(gradient_bytes, replicas);
    } else {
      sent += (zero == 2 ? accum : 1) * scatter(gradient_bytes) + scatter(bytes);  // gradients in, parameters out
    }
  }
  constexpr std::int64_t kLossTotals = 2 * sizeof(double);  // (loss sum, count): normalise_gradients
  constexpr std::int64_t kClipSums = 2 * sizeof(double);    // ZeRO's squares of the other replicas' pieces
  return sent + all_reduce_bytes(kLossTotals, replicas) + (zero > 0 ? all_reduce_bytes(kClipSums, replicas) : 0);
}

parallel::ElementBytes sp_element_bytes(const config::RunConfig& config) {
  // Every strategy moves the activations (Q, K, V, O and their gradients) as they are, and lse,
  // D and the partial sums in the compute dtype: f64 for f64, f32 otherwise.
  const auto activation = static_cast<std::int64_t>(dtype_size(config.train.dtype));
  const std::int64_t compute = config.train.dtype == DType::f64 ? 8 : 4;
  return {activation, compute, compute};
}

std::map<std::string, std::int64_t> sp_call_bytes(parallel::SpStrategy strategy, const parallel::AttentionDims& dims,
                                                  const comm::ProcessGrid& grid, const parallel::ElementBytes& bytes,
                                                  bool checkpointed) {
  using parallel::Pass;
  std::map<std::string, std::int64_t> sent{{"sp", 0}, {"sp.team", 0}, {"sp.ring", 0}};
  const int P = grid.group_size("sp");
  if (P == 1) return sent;
  // The hybrid at U = 1 is WallFacer and at U = P Ulysses (make_ulysses_wallfacer_attention).
  const int U = strategy == parallel::SpStrategy::ulysses_wallfacer ? grid.config().U : 1;
  if (const parallel::SpStrategy runs = parallel::effective_sp_strategy(strategy, P, U); runs != strategy) {
    return sp_call_bytes(runs, dims, grid, bytes,
                         checkpointed);
  }
  const bool hybrid = strategy == parallel::SpStrategy::ulysses_wallfacer;
  const bool wallfacer = strategy == parallel::SpStrategy::wallfacer || hybrid;
  const int C = wallfacer ? grid.wallfacer().team_size() : 1;
  const int logical = wallfacer ? grid.sp_logical_index(grid.coord("sp")) : grid.coord("sp");
  // The model's strategies keep the forward's K/V for the backward (SpAttentionConfig's
  // default); a replay re-dispatches them.
  const parallel::BackwardKv backward_kv = checkpointed ? parallel::BackwardKv::redispatch
                                                        : parallel::BackwardKv::keep_forward;
  parallel::SpTraffic call =
      parallel::sp_attention_traffic(strategy, dims, P, U, C, logical, Pass::forward, bytes, backward_kv);
  call += checkpointed ? parallel::sp_replay_backward_traffic(strategy, dims, P, U, C, logical, bytes)
                       : parallel::sp_attention_traffic(strategy, dims, P, U, C, logical, Pass::backward, bytes,
                                                        backward_kv);
  if (!wallfacer) {  // ring and Ulysses communicate over the sp group only
    sent["sp"] = call.p2p_sent + call.collective_sent;
    return sent;
  }
  // WallFacer: the collectives in the team, the dispatch over the sp group, the rest of the P2P
  // on the sub-ring. The hybrid: the same for its WallFacer part (the dispatch over its
  // WallFacer group), and its all-to-alls, its Ulysses part, over sp.ulysses.
  const parallel::AttentionDims wallfacer_dims = hybrid ? parallel::ulysses_wallfacer_dims(dims, P, U).wallfacer : dims;
  const int W = P / U, logical_w = logical / U;
  const std::int64_t dispatch =
      parallel::wallfacer_dispatch_bytes(wallfacer_dims, W, C, logical_w, Pass::forward, bytes, backward_kv) +
      parallel::wallfacer_dispatch_bytes(wallfacer_dims, W, C, logical_w, Pass::backward, bytes, backward_kv);
  std::int64_t all_to_all = 0;
  if (hybrid) {
    const parallel::AttentionDims ulysses_dims = parallel::ulysses_wallfacer_dims(dims, P, U).ulysses;
    all_to_all = parallel::ulysses_traffic(ulysses_dims, U, Pass::forward, bytes).collective_sent +
                 (checkpointed ? parallel::sp_replay_backward_traffic(parallel::SpStrategy::ulysses, ulysses_dims, U,
                                                                      1, 1, 0, bytes)
                               : parallel::ulysses_traffic(ulysses_dims, U, Pass::backward, bytes))
                     .collective_sent;
    sent["sp.ulysses"] = all_to_all;
  }
  sent["sp.team"] = call.collective_sent - all_to_all;
  sent[hybrid ? "sp.wallfacer" : "sp"] = dispatch;
  sent["sp.ring"] = call.p2p_sent - dispatch;
  return sent;
}

std::int64_t tp_step_bytes(const models::DecoderOptions& options, int tp, std::int64_t tokens, std::int64_t accum,
                           std::int64_t activation_bytes, bool shard_activations,
                           std::int64_t partial_gradient_bytes, const StageShare& stage) {
  if (tp == 1) return 0;
  const models::DecoderOptions m = models::resolved(options);
  const std::int64_t x = tokens * m.d_model * activation_bytes;  // one [B, n, d]
  const std::int64_t hidden = all_reduce_bytes(x, tp);
  const std::int64_t gather = (tp - 1) * (x / tp);  // an all-gather of X, or a reduce-scatter of X
  const std::int64_t column_layers = 1 + (m.feed_forward == nn::FeedForwardKind::swiglu ? 2 : 1);  // qkv, ff in
  const std::int64_t row_layers = 2;                                                          // proj, ff down
  const std::int64_t recompute = m.checkpoint_attention ? 1 : 0;  // the backward reruns the forward
  std::int64_t per_block = 0, embedding = 0, head = 0;
  if (shard_activations) {
    per_block = (column_layers + row_layers) * (2 + recompute) * gather;
    embedding = hidden + gather;  // the lookup's sum, then the sharded stream's gradient gathered
    head = 2 * gather;            // its input gathered, the gradient reduce-scattered
  } else {
    per_block = (column_layers + (1 + recompute) * row_layers) * hidden;
    embedding = hidden;  // the lookup's sum (forward)
    head = hidden;       // the head input's gradient (backward)
  }
  // Whatever the shards mark partial over tp, sharded activations or not (a norm over split
  // heads is partial either way): one sum per step.
  const std::int64_t partial_gradients = all_reduce_bytes(partial_gradient_bytes, tp);
  constexpr auto kDouble = static_cast<std::int64_t>(sizeof(double));
  const std::int64_t loss = all_reduce_bytes(tokens * kDouble, tp) + all_reduce_bytes(2 * tokens * kDouble, tp);
  const std::int64_t blocks = stage.blocks < 0 ? m.n_layer : stage.blocks;
  const std::int64_t microbatch =
      blocks * per_block + (stage.embedding ? embedding : 0) + (stage.head ? head + loss : 0);
  // + the clip's split sum of squares
  return accum * microbatch + partial_gradients + all_reduce_bytes(kDouble, tp);
}

std::int64_t pp_step_bytes(int pp, int pp_rank, int virtual_stages, std::int64_t microbatches,
                           std::int64_t hidden_bytes) {
  if (pp == 1) return 0;
  const int stages = pp * virtual_stages;
  std::int64_t sends = 0;  // per microbatch
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    const int global = chunk * pp + pp_rank;
    if (global + 1 < stages) ++sends;  // the hidden states forward
    if (global > 0) ++sends;           // their gradient backward
  }
  constexpr std::int64_t kLossTotals = 2 * sizeof(double);  // Trainer::compute_gradients' sum over pp
  constexpr std::int64_t kClipSums = 2 * sizeof(double);    // the other stages' squares (GradNormScope::stages)
  return microbatches * sends * hidden_bytes + all_reduce_bytes(kLossTotals, pp) + all_reduce_bytes(kClipSums, pp);
}

GroupBytes predicted_step_traffic(const config::RunConfig& config, const models::DecoderOptions& options,
                                  const comm::ProcessGrid& grid, const nn::Module& module) {
  return predicted_step_traffic(config, TrafficShape{.blocks = options}, grid, module);
}

GroupBytes predicted_step_traffic(const config::RunConfig& config, const TrafficShape& shape,
                                  const comm::ProcessGrid& grid, const nn::Module& module) {
  const std::vector<Tensor> params = module.parameters();
  const int replicas = grid.group_size("dp_sp");
  const int zero = effective_zero_stage(replicas, config.parallel.zero);
  const int pp = config.parallel.pp, pp_virtual = pp > 1 ? config.parallel.pp_virtual : 1;
  // The parameters shared with another pipeline stage (the tied embedding), laid out isolated:
  // the indices Trainer::set_up_pipeline passes to ReplicaGradients.
  std::vector<std::size_t> shared;
  if (pp > 1) {
    if (const auto* model = dynamic_cast<const models::Model*>(&module)) shared = models::pipeline_shared_parameter_indices(*model);
  }
  const FlatLayout layout = replica_layout(params, gradient_bucket_bytes(config), replicas, zero, shared);
  const int replica = zero > 0 ? grid.group_rank("dp_sp") : 0;
  // The bytes reduce_partial_gradients sums over tp: of the parameters marked partial, what this
  // replica's optimizer holds (all of them, or its ZeRO pieces), in their dtype (the masters').
  std::int64_t partial = 0;
  const auto shards = module.parameter_shards();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    if (shards[k].partial_gradient_group != "tp") continue;
    const auto element = static_cast<std::int64_t>(dtype_size(params[k].dtype()));
    for (const FlatLayout::Owned& owned : layout.owned(k, replica)) partial += (owned.end - owned.begin) * element;
  }
  GroupBytes predicted;
  for (std::string_view name : comm::ProcessGrid::group_names()) predicted[std::string(name)] = 0;

  const models::DecoderOptions m = models::resolved(shape.blocks);
  const int tp = config.parallel.tp, sp = config.parallel.sp;
  const std::int64_t accum = config::grad_accum_steps(config);
  const std::int64_t tokens = config.train.micro_batch_size * config.train.seq_len / sp;  // per rank
  const auto activation = static_cast<std::int64_t>(dtype_size(config.train.dtype));

  // This rank's stage: its blocks over all its chunks, the embedding, the head.
  const models::StageRange stage = models::pipeline_stage(config, grid);
  StageShare share{.blocks = 0, .embedding = stage.embedding && shape.vocabulary, .head = stage.head && shape.vocabulary};
  for (const models::BlockRange& chunk : stage.chunks) share.blocks += (chunk.end < 0 ? m.n_layer : chunk.end) - chunk.first;

  // Tensor parallelism splits the heads: each rank's attention sees n_head / tp of them.
  const parallel::AttentionDims dims{config.train.micro_batch_size, config.train.seq_len, m.n_head / tp,
                                     m.n_kv_head / tp, m.d_model / m.n_head};
  const auto calls = share.blocks * accum;
  for (const auto& [group, bytes] : sp_call_bytes(config.parallel.sp_strategy, dims, grid, sp_element_bytes(config),
                                                  m.checkpoint_attention)) {
    predicted[group] = calls * bytes;
  }
  predicted["tp"] =
      tp_step_bytes(m, tp, tokens, accum, activation, config.parallel.tp_shard_activations, partial, share);
  // ZeRO-2 reduce-scatters in every backward: under pp one per backward action of the schedule.
  predicted["dp_sp"] = gradient_sync_bytes(layout, replicas, zero, accum * pp_virtual, config.parallel.grad_reduce_dtype);
  if (pp == 1) return predicted;

  // The hidden states the stages exchange (DecoderLM::stage_hidden): [B, n / parts, d_model] in
  // the compute dtype (the parameters' own unless mixed precision), parts = tp with the activations sharded over tp.
  const std::int64_t parts = config.parallel.tp_shard_activations ? tp : 1;
  const nn::PrecisionPolicy precision = nn::PrecisionPolicy::for_train_dtype(config.train.dtype);
  const DType hidden_dtype = precision.mixed() ? precision.compute : params.empty() ? config.train.dtype : params.front().dtype();
  const std::int64_t rows = tokens / parts + config.train.micro_batch_size * shape.extra_hidden_rows;
  const std::int64_t hidden = rows * m.d_model * static_cast<std::int64_t>(dtype_size(hidden_dtype));
  predicted["pp"] = pp_step_bytes(pp, grid.coord("pp"), pp_virtual, accum, hidden);
  // The tied embedding's pieces summed between the first and the last stage.
  const int embedding_ranks = grid.group_size("pp.embedding");
  std::int64_t embedding = 0;
  for (const std::size_t k : shared) {
    const auto element = static_cast<std::int64_t>(dtype_size(params[k].dtype()));
    for (const FlatLayout::Owned& owned : layout.owned(k, replica)) {
      embedding += all_reduce_bytes((owned.end - owned.begin) * element, embedding_ranks);
    }
  }
  predicted["pp.embedding"] = embedding;
  return predicted;
}

}  // namespace wf::train

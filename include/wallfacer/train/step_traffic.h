#pragma once
// The bytes one optimizer step of train::Trainer sends from one rank on each process group,
// predicted from the layout, the decoder's shapes and this rank's parameters: what
// `wallfacer bench layout` prints beside the comm::TrafficRegistry counters, and what
// tests/dist/test_step_traffic.cpp compares them with. Counting follows comm/traffic.h with
// comm::Group's integer arithmetic (an all-reduce of S bytes over T ranks sends 2·(T−1)·S/T,
// rounded down per call); sent equals received in every term.
//
// Per step, with A = grad_accum_steps microbatches of B sequences, n = seq_len / sp tokens per
// rank, L = the blocks this rank holds (n_layer without pipeline parallelism; under pp the blocks
// of its stage's model chunks, models::pipeline_stage):
//   sp groups  L·A attention calls, each its forward and its backward (traffic_model.h, per
//              strategy; the dispatch over "sp", the sub-ring "sp.ring", the team "sp.team"), or
//              with model.checkpoint_attention its forward and its replayed backward
//   tp         the tensor-parallel contract of the layers (parallel/tensor_parallel.h,
//              vocab_parallel.h), X = B·n·d_model activation bytes per microbatch:
//                every column-parallel linear all-reduces its input's gradient (backward):
//                  qkv, the feed-forward's input projections (MLP 1, SwiGLU 2), the LM head
//                every row-parallel linear all-reduces its output (forward; again in the
//                  backward's recompute under checkpoint_attention): proj, the feed-forward's down
//                the vocab-parallel embedding all-reduces its lookup (forward)
//                the vocab-parallel cross-entropy all-reduces the row max, then (sum of exps,
//                  target logit): B·n and 2·B·n doubles
//              plus once per step the gradient-norm clip's split sum (one double).
//              With parallel.tp_shard_activations each of those layers all-gathers or
//              reduce-scatters X in BOTH passes instead, (tp−1)/tp·X each way (a column layer's
//              input gathered forward, reduce-scattered backward; a row layer's output the
//              reverse; the recompute repeats both kinds' forward), entering the sharded stream
//              after the embedding all-gathers its gradient (backward). Once per step the
//              gradients the shards mark partial over tp are all-reduced: the norms' and row
//              biases' with parallel.tp_shard_activations, norms over split heads (QK-norm) always.
//              Under pp the embedding's terms are the first stage's, the head's and the
//              cross-entropy's the last stage's.
//   dp_sp      the gradient reduction of replica_gradients.h over the buckets of FlatLayout
//              (parallel.grad_bucket_mb), in the parameters' dtype: ZeRO-0 all-reduces each
//              bucket once; ZeRO-1 reduce-scatters each (padded) bucket once and all-gathers it
//              after the update; ZeRO-2 reduce-scatters it in every backward (A times, under pp
//              A·pp_virtual: one per backward action of the schedule) and all-gathers it once;
//              ZeRO 1 and 2 also sum the clip's two squares over the replicas. Then the loss
//              totals (two doubles) of normalise_gradients. Under pp the layout is the stage's,
//              with the tied embedding laid out isolated (FlatLayout::Param::isolated), as the
//              Trainer lays it out.
//   pp         (pp > 1) PipelineRunner's P2P: per microbatch and model chunk, the hidden states
//              [B, n (/ tp with tp_shard_activations), d_model] in the parameters' dtype sent
//              forward unless the chunk is the last global stage, and their gradient (the same
//              bytes) sent backward unless it is the first; then the loss totals (two doubles,
//              Trainer::compute_gradients) and the clip's two squares (GradNormScope::stages),
//              each one all-reduce over pp.
//   pp.embedding  (pp > 1, tied embedding, first and last stage) one all-reduce of each optimizer
//              piece of the embedding's gradient (Trainer::sum_shared_gradients): the whole
//              shard at ZeRO-0, this replica's owned ranges of it at ZeRO 1 and 2.
// Every other group ("world", "dp") moves nothing during a step.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/parallel/traffic_model.h"
#include "wallfacer/train/grad_sync.h"
#include "wallfacer/train/flat_layout.h"

namespace wf::train {

// Bytes sent per step by group name; std::nullopt where the formulas cannot say.
using GroupBytes = std::map<std::string, std::optional<std::int64_t>>;

// Bytes comm::Group counts for one all-reduce of `bytes` over `ranks`.
std::int64_t all_reduce_bytes(std::int64_t bytes, int ranks);

// The dp_sp term: the reduction of the buckets of `layout` (replica_layout's, for this stage)
// at ZeRO stage `zero` with `accum` backwards per step (ZeRO-2 reduce-scatters in each), and the
// loss totals, over `replicas` ranks.
std::int64_t gradient_sync_bytes(const FlatLayout& layout, int replicas, int zero = 0, std::int64_t accum = 1,
                                 DType reduce_dtype = DType::f32);

// The bytes per element the sp strategy of `config` moves (the same rule for every strategy):
// activations in the run's dtype, lse, D and partial sums in the compute dtype (f32; f64 for f64
// runs).
parallel::ElementBytes sp_element_bytes(const config::RunConfig& config);

// The sp groups' term of one attention call (forward + backward, or forward + replayed backward
// when `checkpointed`) on this rank: {"sp", "sp.team", "sp.ring"} → bytes sent; for
// ulysses-wallfacer with 1 < U < sp also "sp.ulysses" (its all-to-alls) and "sp.wallfacer" (its
// dispatch).
std::map<std::string, std::int64_t> sp_call_bytes(parallel::SpStrategy strategy, const parallel::AttentionDims& dims,
                                                  const comm::ProcessGrid& grid, const parallel::ElementBytes& bytes,
                                                  bool checkpointed);

// What a pipeline stage holds of the decoder, for the tp term: its blocks (all chunks), and
// whether it embeds (the first stage) and runs the head and loss (the last). The default: the
// whole model (`blocks` < 0: model.n_layer).
struct StageShare {
  std::int64_t blocks = -1;
  bool embedding = true;
  bool head = true;
};

// The tp term of one step: `tokens` = B·n per microbatch on this rank, `accum` microbatches,
// activations of `activation_bytes` each.
// `partial_gradient_bytes`: the gradient bytes of the parameters this rank's shards mark partial
// over tp (summed once per step by parallel::reduce_partial_gradients: under activation sharding the
// norms and row biases, and norms over split heads always). `stage`: what this rank holds under
// pipeline parallelism.
std::int64_t tp_step_bytes(const models::DecoderOptions& model, int tp, std::int64_t tokens, std::int64_t accum,
                           std::int64_t activation_bytes, bool shard_activations = false,
                           std::int64_t partial_gradient_bytes = 0, const StageShare& stage = {});

// The pp term of one step on pp rank `pp_rank` of `pp` (> 1) with `virtual_stages` chunks each:
// `microbatches` × (forward sends + backward sends) of `hidden_bytes` each, plus the two
// all-reduces of two doubles (loss totals, clip squares). 0 at pp = 1.
std::int64_t pp_step_bytes(int pp, int pp_rank, int virtual_stages, std::int64_t microbatches,
                           std::int64_t hidden_bytes);

// What the formulas read of a model besides its parameters: its blocks' shapes as a decoder's
// options (layers, heads, widths, the feed-forward, the checkpoint); whether its tp term has a
// vocabulary embedding and head (a decoder) or only the blocks (DiT, whose embedders and final
// layer are replicated); and the rows a stage's hidden states hold per sequence beyond its
// tokens (DiT's conditioning row, models/dit.h).
struct TrafficShape {
  models::DecoderOptions blocks;
  bool vocabulary = true;
  std::int64_t extra_hidden_rows = 0;
};

// Every group of comm::ProcessGrid::group_names for this rank of `grid` (config's layout):
// `model` is the trainer's decoder (resolved options), `module` the built model on this rank (its
// parameters in order, and their shards; a models::Model also names the parameters it shares
// with another pipeline stage); the bucket size and ZeRO stage are the config's.
GroupBytes predicted_step_traffic(const config::RunConfig& config, const models::DecoderOptions& model,
                                  const comm::ProcessGrid& grid, const nn::Module& module);
// The same for any model the shape describes.
GroupBytes predicted_step_traffic(const config::RunConfig& config, const TrafficShape& shape,
                                  const comm::ProcessGrid& grid, const nn::Module& module);

}  // namespace wf::train

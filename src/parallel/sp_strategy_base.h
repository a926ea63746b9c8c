#pragma once
// What ring attention, Ulysses and the ulysses-wallfacer hybrid share (internal to
// src/parallel): the sp group, the sequence layout of every sp rank, the checks of a call's
// local shard, forward() and replay() over one strategy-specific run(), the work counters the
// tests read (SpAttentionWork), and small raw-tensor helpers for packing messages, which run on
// the tensors' device. WallFacer uses the replay check and the helpers.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel::detail {

// The work counters of the most recent call. Shared with the autograd Functions, because the
// backward runs after forward() returned (and after the strategy may have been called again).
struct WorkRecord {
  BlockAttentionStats forward, backward;
};

// A replay's saved result, handed to a strategy's autograd Function: when set, the Function's
// forward saves what its backward needs from it and returns it, computing no attention.
using Replayed = std::optional<AttentionResult>;

// wf::Error, prefixed by `what` ("ring attention"), unless `saved` can be what a strategy's
// forward returned for this rank's q [B, n, h, d]: out of q's shape and dtype, lse [B, h, n] of
// q's dtype. Returns both detached, so the replay's graph never reaches whatever made them.
AttentionResult check_replayed(const char* what, const Tensor& q, const AttentionResult& saved);

// The chunk assignment (sequence_layout.h, document_chunks) of the last documents a strategy
// saw: a model calls attention once per layer with the same bounds, so it is derived once.
class DocumentChunkCache {
 public:
  // get() for these documents; `changed` says whether it differs from the previous call's.
  std::shared_ptr<const ChunkAssignment> get(SequenceLayout layout, const DocumentBounds& documents, std::int64_t N,
                                             int P, int C, int U, bool* changed = nullptr);

 private:
  bool valid_ = false;
  DocumentBounds documents_;
  std::shared_ptr<const ChunkAssignment> chunks_;
};

class SpStrategyBase : public nn::AttentionStrategy, public SpAttentionWork {
 public:
  // Both check the call, then run(): forward without a saved result, replay with one (it also
  // zeroes the forward work counters: a replay computes no attention).
  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options) final;
  AttentionResult replay(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                         const AttentionResult& saved) final;
  std::string name() const override { return name_; }
  BlockAttentionStats last_forward_work() const override { return work_->forward; }
  BlockAttentionStats last_backward_work() const override { return work_->backward; }

 protected:
  // Checks N against the C = 1 layout over the sp group (the same message on every rank).
  SpStrategyBase(std::string name, const SpAttentionConfig& config, comm::Group& sp);
  // The same for a layout cut with teams of C and Ulysses degree U (sequence_layout.h);
  // logical[ρ] is sp rank ρ's logical sp index.
  SpStrategyBase(std::string name, const SpAttentionConfig& config, comm::Group& sp, int C, int U,
                 const std::vector<int>& logical);

  // wf::Error unless q [B, N/P, h, d], k = v [B, N/P, h_kv, d] (h_kv | h; all f32, f64 or bf16,
  // which every strategy moves as it is and multiplies per multiply_dtype_of; one device) and
  // options carry no offsets (global positions come from the layout).
  void check_call(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) const;

  // Applies the strategy's autograd Function to (q, k, v) after check_call, with `replayed`
  // passed on to it; further checks that must precede any communication go here too.
  virtual AttentionResult run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                              Replayed replayed) = 0;

  // runs_ for a call: with packed documents on the zigzag, the layout balanced by their work
  // (document_chunks, the loader's rule), derived again only when the documents change.
  const std::vector<std::vector<TokenRun>>& runs_for(const AttentionOptions& options);

  std::string name_;
  SpAttentionConfig config_;
  comm::Group& sp_;
  int P_ = 1, rank_ = 0;
  std::vector<std::vector<TokenRun>> runs_;  // runs_[ρ]: the tokens sp rank ρ holds
  std::shared_ptr<WorkRecord> work_ = std::make_shared<WorkRecord>();

 private:
  int C_ = 1, U_ = 1;
  std::vector<int> logical_;
  DocumentChunkCache chunks_;
  std::vector<std::vector<TokenRun>> document_runs_;  // runs_ under chunks_'s assignment
};

// ---- dtypes under mixed precision ------------------------------------------------------------
// What travels is the activation dtype (the inputs': bf16 under bf16 mixed precision); lse, D
// and every partial sum (o before its last rescale, dQ, dK, dV) are kept and sent in the compute
// dtype: f64 for f64 inputs, f32 otherwise.
DType compute_dtype_of(DType activation);
// The dtype the blocks multiply in on `device`: bf16 activations as they are where its backend
// multiplies bf16 natively (bf16 dot products, f32 accumulation), else widened to the compute
// dtype. The backend's attention_operand_dtype, the one choice ops::attention makes too.
DType multiply_dtype_of(DType activation, Device device);

// ---- raw tensor helpers (no autograd) ------------------------------------------------------

// [2, ...]: a and b (same shape and dtype) one after the other, so they travel as one message.
Tensor pack_pair(const Tensor& a, const Tensor& b);
// View of half i (0 or 1) of a pack_pair result, with the original shape.
Tensor pair_half(const Tensor& pair, int i);
// acc += x elementwise (same shape, f32 or f64, one device).
void add_into(Tensor& acc, const Tensor& x);

}  // namespace wf::parallel::detail

#pragma once
// Sequence-parallel attention's local computation and the backend entries of the sp strategies
// and of the vocabulary-parallel loss, on any device: tests/parallel/test_sp_on_test_device.cpp
// and test_vocab_parallel_on_device.cpp (the test device, bit for bit) and
// tests/cuda/test_sp_on_cuda.cpp (a GPU, within tolerances) share them.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sp_strategy.h"

namespace wf::parity {

// ---- block attention over two K/V blocks ----------------------------------------------------

struct BlockProblem {
  Tensor q, d_o, d_lse;
  Tensor k[2], v[2];
  std::vector<parallel::TokenRun> q_runs{{0, 4}, {12, 4}};  // zigzag-like: the first and last quarter
  std::vector<parallel::TokenRun> kv_runs[2] = {{{4, 4}, {8, 4}}, {{0, 4}, {12, 4}}};
};

// Causal GQA blocks (4 query heads over 2 K/V heads), inputs in `dtype` on the CPU.
BlockProblem block_problem(DType dtype);

struct BlockResult {
  Tensor o, lse, dq, dk[2], dv[2];
};

// Both blocks merged into (o, lse), then both backwards with the gradient on lse, on `device`;
// *host_syncs: the host synchronisations while it computed.
BlockResult run_blocks(const BlockProblem& p, Device device, std::int64_t* host_syncs);

// ---- the strategies at sp = 1 ---------------------------------------------------------------

struct StrategyResult {
  Tensor out, lse, dq, dk, dv;
};

// `strategy` (zigzag, causal) over the sp group of a world of one (no mpirun needed).
std::shared_ptr<nn::AttentionStrategy> attention_at_sp1(parallel::SpStrategy strategy);

// Forward, then backward of Σ out·g_out + Σ lse·g_lse, through `strategy` on `device`: q [2, 8, 4, 4],
// k, v [2, 8, 2, 4].
StrategyResult run_strategy(nn::AttentionStrategy& strategy, DType dtype, Device device,
                            const AttentionOptions& options = {.causal = true});

// ---- the backend entries WallFacer's combine and Ulysses' message use -------------------------

struct SpEntryOutputs {
  Tensor lse_star, weight, scaled, minus_delta, message, summed;
};

// team_lse_combine (one row with a member that saw no key: weight 0), scale_attention_rows,
// attention_minus_delta and a Ulysses block packed as bf16 and added twice, on `device`.
SpEntryOutputs run_sp_entries(DType dtype, Device device);

// ---- the vocabulary-parallel loss's entries, for every rank of a simulated tp group of 3 --------

// What every rank's entries wrote (dx: the ranks' gradients stacked), the all-reduces done on the
// host copies; `mean` divides by the count of targets.
struct VocabPieces {
  Tensor count, max, sums, lse, loss, dx;
};
VocabPieces run_vocab_parallel_entries(Device device, bool mean);

// vocab_parallel_local_ids of 6 ids over a vocabulary of 10, the shard of rows [4, 7): local ids and mask.
std::pair<Tensor, Tensor> run_vocab_parallel_local_ids(Device device);

// replica_spread of two parameters' extremes.
Tensor run_replica_spread(Device device);

}  // namespace wf::parity

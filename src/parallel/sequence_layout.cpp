#include "wallfacer/parallel/sequence_layout.h"

#include <algorithm>
#include <numeric>

#include "kernels/kernel_args.h"
#include "src/ops/common.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/core/error.h"

namespace wf::parallel {

std::string_view sequence_layout_name(SequenceLayout layout) {
  switch (layout) {
    case SequenceLayout::contiguous: return "contiguous";
    case SequenceLayout::zigzag: return "zigzag";
  }
  WF_FAIL("unknown sequence layout {}", static_cast<int>(layout));
}

SequenceLayout layout_for_mask(bool causal) { return causal ? SequenceLayout::zigzag : SequenceLayout::contiguous; }

SequenceLayout parse_sequence_layout(std::string_view name) {
  if (name == "contiguous") return SequenceLayout::contiguous;
  if (name == "zigzag") return SequenceLayout::zigzag;
  WF_FAIL("unknown sequence layout '{}' (valid: contiguous, zigzag)", name);
}

namespace {

void check_team_split(int P, int C) {
  WF_CHECK(P >= 1, "sequence layout: the sp group needs at least 1 rank (got P = {})", P);
  WF_CHECK(C >= 1 && P % C == 0, "sequence layout: team size C = {} must be >= 1 and divide P = {}", C, P);
}

void check_logical_index(int P, int logical_index) {
  WF_CHECK(logical_index >= 0 && logical_index < P, "sequence layout: logical sp index {} is outside [0, P = {})",
           logical_index, P);
}

// Appends a run, merging it into the previous one when they touch, so runs stay maximal.
void append_run(std::vector<TokenRun>& runs, TokenRun run) {
  if (run.length == 0) return;
  if (!runs.empty() && runs.back().start + runs.back().length == run.start) {
    runs.back().length += run.length;
  } else {
    runs.push_back(run);
  }
}

// The sub-range [offset, offset + length) of the tokens `runs` lists, in storage order.
std::vector<TokenRun> slice_runs(const std::vector<TokenRun>& runs, std::int64_t offset, std::int64_t length) {
  std::vector<TokenRun> out;
  std::int64_t skipped = 0;  // storage positions before the current run
  for (const TokenRun& run : runs) {
    const std::int64_t begin = std::max(offset, skipped), end = std::min(offset + length, skipped + run.length);
    if (begin < end) append_run(out, {run.start + (begin - skipped), end - begin});
    skipped += run.length;
  }
  return out;
}

// Team t's tokens for a layout whose sequence length has already been checked.
std::vector<TokenRun> team_runs(SequenceLayout layout, std::int64_t N, int P, int C, int team) {
  const int T = P / C;
  const std::int64_t team_tokens = N / T;
  if (layout == SequenceLayout::contiguous) return {{team * team_tokens, team_tokens}};
  const std::int64_t chunk = N / (2 * static_cast<std::int64_t>(T));
  std::vector<TokenRun> runs;
  append_run(runs, {team * chunk, chunk});
  append_run(runs, {(2 * static_cast<std::int64_t>(T) - 1 - team) * chunk, chunk});
  return runs;
}

}  // namespace

namespace {
void check_ulysses_split(int P, int U) {
  WF_CHECK(U >= 1 && P >= 1 && P % U == 0, "sequence layout: the Ulysses degree U = {} must be >= 1 and divide P = {}",
           U, P);
}
}  // namespace

std::int64_t sequence_length_multiple(SequenceLayout layout, int P, int C, int U) {
  check_ulysses_split(P, U);
  const int W = P / U;
  check_team_split(W, C);
  (void)sequence_layout_name(layout);  // rejects values outside the enum
  const auto single = [layout](std::int64_t ranks, std::int64_t team) {
    return layout == SequenceLayout::contiguous ? ranks : std::lcm(ranks, 2 * (ranks / team));
  };
  if (U == 1) return single(P, C);
  // The W shards need single(W, C) | N; each shard's N/W tokens need single(U, 1) | N/W.
  return std::lcm(single(W, C), W * single(U, 1));
}

void check_sequence_length(SequenceLayout layout, std::int64_t N, int P, int C, int U) {
  const std::int64_t multiple = sequence_length_multiple(layout, P, C, U);
  if (N > 0 && N % multiple == 0) return;
  const std::int64_t below = N > 0 ? N / multiple * multiple : 0, above = N > 0 ? below + multiple : multiple;
  const std::string nearest =
      below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above);
  if (U > 1) {
    WF_FAIL("{} sequence layout: N = {} tokens cannot be split over P = {} ranks as U = {} Ulysses ranks times "
            "P/U = {} WallFacer ranks in teams of C = {}: it needs N divisible by {}{}; nearest valid N: {}",
            sequence_layout_name(layout), N, P, U, P / U, C, multiple,
            layout == SequenceLayout::contiguous ? " = P" : " = 2·P (each WallFacer shard's tokens in 2·U chunks)",
            nearest);
  }
  const std::string why =
      layout == SequenceLayout::contiguous
          ? fmt::format("N divisible by P = {}", P)
          : fmt::format("N divisible by {} = lcm(P = {} for the member slices, 2·P/C = {} for the chunks)", multiple,
                        P, 2 * (P / C));
  WF_FAIL("{} sequence layout: N = {} tokens cannot be split over P = {} ranks in teams of C = {}: it needs {}; "
          "nearest valid N: {}",
          sequence_layout_name(layout), N, P, C, why, nearest);
}

std::vector<TokenRun> team_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int team) {
  check_sequence_length(layout, N, P, C);
  WF_CHECK(team >= 0 && team < P / C, "sequence layout: team {} is outside [0, T = P/C = {})", team, P / C);
  return team_runs(layout, N, P, C, team);
}

std::vector<TokenRun> rank_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index, int U) {
  check_sequence_length(layout, N, P, C, U);
  check_logical_index(P, logical_index);
  const int W = P / U;
  const std::int64_t shard = N / W;  // a WallFacer member's tokens
  const int s = logical_index / U;
  const std::vector<TokenRun> storage = slice_runs(team_runs(layout, N, W, C, s / C), (s % C) * shard, shard);
  if (U == 1) return storage;
  // Ulysses rank u's part of the shard: the C = 1 layout over U ranks, of storage indices.
  std::vector<TokenRun> runs;
  for (const TokenRun& indices : rank_tokens(layout, shard, U, 1, logical_index % U)) {
    for (const TokenRun& run : slice_runs(storage, indices.start, indices.length)) append_run(runs, run);
  }
  return runs;
}

std::vector<std::int64_t> run_positions(const std::vector<TokenRun>& runs) {
  std::vector<std::int64_t> positions;
  for (const TokenRun& run : runs) {
    for (std::int64_t i = 0; i < run.length; ++i) positions.push_back(run.start + i);
  }
  return positions;
}

std::vector<std::int64_t> position_ids(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       int U) {
  return run_positions(rank_tokens(layout, N, P, C, logical_index, U));
}

// ---- shard / unshard -------------------------------------------------------------------------

namespace {

// Elements of one token row: the product of the dims after the sequence dim.
std::int64_t token_row(const Tensor& t) {
  std::int64_t elements = 1;
  for (std::int64_t d = 2; d < t.dim(); ++d) elements *= t.size(d);
  return elements;
}

// Copies a rank's runs between a global [B, N, row] tensor and its local [B, n, row] one, from
// `from` into `to` (global into local when `to_local`), with the device's block copy: one per
// run, over the batch. The one loop both shard and unshard use.
void copy_runs(const char* what, const std::vector<TokenRun>& runs, const Tensor& from, Tensor& to, bool to_local) {
  const ops::Kernels k = ops::kernels_for(what, {from, to});
  const std::int64_t row = token_row(from);
  const std::int64_t global_block = (to_local ? from : to).size(1) * row;
  const std::int64_t local_block = (to_local ? to : from).size(1) * row;
  std::int64_t local_row = 0;
  for (const TokenRun& run : runs) {
    const std::int64_t global_at = run.start * row, local_at = local_row * row;
    k->copy_blocks(k.stream, dtype_size(from.dtype()), from.raw_data(), to_local ? global_block : local_block,
                   to_local ? global_at : local_at, to.raw_data(), to_local ? local_block : global_block,
                   to_local ? local_at : global_at, from.size(0), run.length * row);
    local_row += run.length;
  }
}

void check_sequence_tensor(const Tensor& t, const char* what) {
  WF_CHECK(t.defined(), "{}: the tensor is undefined", what);
  WF_CHECK(t.dim() >= 2, "{}: expected a [B, N, ...] tensor with the sequence at dim 1, got shape {}", what,
           shape_str(t.shape()));
}

}  // namespace

Tensor shard_sequence(const Tensor& global, SequenceLayout layout, int P, int C, int logical_index, int U) {
  check_sequence_tensor(global, "shard_sequence");
  const std::int64_t N = global.size(1);
  const std::vector<TokenRun> runs = rank_tokens(layout, N, P, C, logical_index, U);
  Shape local_shape = global.shape();
  local_shape[1] = N / P;
  Tensor local = Tensor::empty(local_shape, global.dtype(), global.device());
  copy_runs("shard_sequence", runs, global, local, /*to_local=*/true);
  return local;
}

Tensor unshard_sequence(const std::vector<Tensor>& locals, SequenceLayout layout, int P, int C, int U) {
  WF_CHECK(P >= 1 && static_cast<int>(locals.size()) == P, "unshard_sequence: {} local tensors for P = {} ranks",
           locals.size(), P);
  check_sequence_tensor(locals[0], "unshard_sequence");
  for (std::size_t l = 1; l < locals.size(); ++l) {
    check_sequence_tensor(locals[l], "unshard_sequence");
    WF_CHECK(locals[l].shape() == locals[0].shape() && locals[l].dtype() == locals[0].dtype(),
             "unshard_sequence: rank {} holds {} {} but rank 0 holds {} {}; every rank must hold the same shape "
             "and dtype",
             l, dtype_name(locals[l].dtype()), shape_str(locals[l].shape()), dtype_name(locals[0].dtype()),
             shape_str(locals[0].shape()));
  }
  const std::int64_t n = locals[0].size(1), N = n * P;
  Shape global_shape = locals[0].shape();
  global_shape[1] = N;
  Tensor global = Tensor::empty(global_shape, locals[0].dtype(), locals[0].device());
  for (int l = 0; l < P; ++l) {
    copy_runs("unshard_sequence", rank_tokens(layout, N, P, C, l, U), locals[static_cast<std::size_t>(l)], global,
              /*to_local=*/false);
  }
  return global;
}

// ---- block masks and pair counts -------------------------------------------------------------

std::string_view block_mask_name(BlockMask mask) {
  switch (mask) {
    case BlockMask::full: return "full";
    case BlockMask::causal: return "causal";
    case BlockMask::skip: return "skip";
  }
  WF_FAIL("unknown block mask {}", static_cast<int>(mask));
}

BlockMask block_mask(TokenRun query, TokenRun key, bool causal) {
  if (query.length <= 0 || key.length <= 0) return BlockMask::skip;
  if (!causal) return BlockMask::full;
  const std::int64_t last_query = query.start + query.length - 1, last_key = key.start + key.length - 1;
  if (last_key <= query.start) return BlockMask::full;
  if (key.start > last_query) return BlockMask::skip;
  return BlockMask::causal;
}

std::int64_t unmasked_pairs(const std::vector<std::int64_t>& query_positions,
                            const std::vector<std::int64_t>& key_positions, bool causal) {
  const auto nq = static_cast<std::int64_t>(query_positions.size());
  const auto nk = static_cast<std::int64_t>(key_positions.size());
  if (!causal) return nq * nk;
  std::vector<std::int64_t> keys = key_positions;
  std::sort(keys.begin(), keys.end());
  std::int64_t pairs = 0;
  for (std::int64_t q : query_positions) pairs += std::upper_bound(keys.begin(), keys.end(), q) - keys.begin();
  return pairs;
}

namespace {

// Pairs (q, k) with k ≤ q between the runs: a causal attention call's pairs (kernel_args.h).
std::int64_t causal_run_pairs(TokenRun query, TokenRun key) {
  kernels::AttentionShape call;
  call.q_len = query.length;
  call.kv_len = key.length;
  call.causal = true;
  call.q_offset = query.start;
  call.kv_offset = key.start;
  return kernels::attention_pairs(call);
}

std::int64_t total_length(const std::vector<TokenRun>& runs) {
  std::int64_t total = 0;
  for (const TokenRun& run : runs) total += run.length;
  return total;
}

}  // namespace

std::int64_t unmasked_pairs(const std::vector<TokenRun>& query_runs, const std::vector<TokenRun>& key_runs,
                            bool causal) {
  if (!causal) return total_length(query_runs) * total_length(key_runs);
  std::int64_t pairs = 0;
  for (const TokenRun& q : query_runs) {
    for (const TokenRun& k : key_runs) pairs += causal_run_pairs(q, k);
  }
  return pairs;
}

// ---- work balance ------------------------------------------------------------------------------

std::int64_t wallfacer_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       bool causal) {
  // Logical indices are the sp indices of the collectives-intra placement.
  const comm::WallFacerLayout grid(P, C, comm::Placement::collectives_intra);
  const std::vector<TokenRun> queries = team_tokens(layout, N, P, C, grid.team(logical_index));
  std::int64_t pairs = 0;
  for (int step = 0; step < grid.ring_size(); ++step) {
    pairs += unmasked_pairs(queries, team_tokens(layout, N, P, C, grid.kv_team_at_step(logical_index, step)), causal);
  }
  return pairs;
}

std::int64_t ring_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int rank, bool causal) {
  return wallfacer_rank_work_pairs(layout, N, P, /*C=*/1, rank, causal);
}

std::int64_t causal_half_blocks(const std::vector<int>& query_chunks, const std::vector<int>& key_chunks) {
  std::int64_t half_blocks = 0;
  for (int q : query_chunks) {
    for (int k : key_chunks) half_blocks += q > k ? 2 : q == k ? 1 : 0;
  }
  return half_blocks;
}

std::vector<int> zigzag_team_chunks(int P, int C, int team) {
  check_team_split(P, C);
  const int T = P / C;
  WF_CHECK(team >= 0 && team < T, "zigzag_team_chunks: team {} is outside [0, T = P/C = {})", team, T);
  return {team, 2 * T - 1 - team};
}

std::int64_t wallfacer_rank_work_half_blocks(int P, int C, int logical_index,
                                             const std::vector<std::vector<int>>& team_chunks) {
  const comm::WallFacerLayout grid(P, C, comm::Placement::collectives_intra);
  WF_CHECK(static_cast<int>(team_chunks.size()) == grid.num_teams(),
           "wallfacer_rank_work_half_blocks: {} team chunk lists for T = P/C = {} teams", team_chunks.size(),
           grid.num_teams());
  const auto& queries = team_chunks[static_cast<std::size_t>(grid.team(logical_index))];
  std::int64_t half_blocks = 0;
  for (int step = 0; step < grid.ring_size(); ++step) {
    half_blocks +=
        causal_half_blocks(queries, team_chunks[static_cast<std::size_t>(grid.kv_team_at_step(logical_index, step))]);
  }
  return half_blocks;
}

std::int64_t wallfacer_rank_work_half_blocks(int P, int C, int logical_index) {
  const comm::WallFacerLayout grid(P, C, comm::Placement::collectives_intra);  // validates P and C first
  std::vector<std::vector<int>> team_chunks;
  for (int t = 0; t < grid.num_teams(); ++t) team_chunks.push_back(zigzag_team_chunks(P, C, t));
  return wallfacer_rank_work_half_blocks(P, C, logical_index, team_chunks);
}

}  // namespace wf::parallel

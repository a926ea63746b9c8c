#include "wallfacer/parallel/sequence_layout.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/kernel_args.h"
#include "src/ops/common.h"
#include "src/ops/document_attention.h"
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

// wf::Error unless `chunks` can lay out N tokens over T teams of the zigzag: every chunk of K,
// K·chunk_tokens = N, held once, K/T chunks per team.
void check_chunks(SequenceLayout layout, const ChunkAssignment& chunks, std::int64_t N, int T) {
  WF_CHECK(layout == SequenceLayout::zigzag,
           "sequence layout: a chunk assignment rearranges the zigzag's chunks; the {} layout takes none",
           sequence_layout_name(layout));
  std::size_t K = 0;
  for (const auto& team : chunks.team_chunks) K += team.size();
  std::vector<int> held(K, 0);
  bool valid = static_cast<int>(chunks.team_chunks.size()) == T && K > 0 && K % static_cast<std::size_t>(T) == 0 &&
               chunks.chunk_tokens * static_cast<std::int64_t>(K) == N;
  for (const auto& team : chunks.team_chunks) {
    valid = valid && team.size() == K / static_cast<std::size_t>(T) && std::is_sorted(team.begin(), team.end());
    for (int c : team) {
      valid = valid && c >= 0 && static_cast<std::size_t>(c) < K && ++held[static_cast<std::size_t>(c)] == 1;
    }
  }
  WF_CHECK(valid,
           "sequence layout: the chunk assignment ({} teams, chunks of {} tokens) does not lay out N = {} tokens over "
           "T = {} teams: it must hold every chunk of N / chunk_tokens once, in ascending order, the same number per "
           "team; build it with balanced_chunk_assignment",
           chunks.team_chunks.size(), chunks.chunk_tokens, N, T);
}

// Team t's tokens for a layout whose sequence length (and chunk assignment) has been checked.
std::vector<TokenRun> team_runs(SequenceLayout layout, std::int64_t N, int P, int C, int team,
                                const ChunkAssignment* chunks) {
  const int T = P / C;
  const std::int64_t team_tokens = N / T;
  if (layout == SequenceLayout::contiguous) return {{team * team_tokens, team_tokens}};
  if (chunks != nullptr) {
    std::vector<TokenRun> runs;
    for (int c : chunks->team_chunks[static_cast<std::size_t>(team)]) {
      append_run(runs, {c * chunks->chunk_tokens, chunks->chunk_tokens});
    }
    return runs;
  }
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

std::vector<TokenRun> team_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int team,
                                  const ChunkAssignment* chunks) {
  check_sequence_length(layout, N, P, C);
  WF_CHECK(team >= 0 && team < P / C, "sequence layout: team {} is outside [0, T = P/C = {})", team, P / C);
  if (chunks != nullptr) check_chunks(layout, *chunks, N, P / C);
  return team_runs(layout, N, P, C, team, chunks);
}

std::vector<TokenRun> rank_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index, int U,
                                  const ChunkAssignment* chunks) {
  check_sequence_length(layout, N, P, C, U);
  check_logical_index(P, logical_index);
  const int W = P / U;
  if (chunks != nullptr) check_chunks(layout, *chunks, N, W / C);
  const std::int64_t shard = N / W;  // a WallFacer member's tokens
  const int s = logical_index / U;
  const std::vector<TokenRun> storage =
      slice_runs(team_runs(layout, N, W, C, s / C, chunks), (s % C) * shard, shard);
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
                                       int U, const ChunkAssignment* chunks) {
  return run_positions(rank_tokens(layout, N, P, C, logical_index, U, chunks));
}

SpShard SpShard::for_documents(const DocumentBounds& documents) const {
  SpShard out = *this;
  out.chunks = balance_documents ? document_chunks(layout, documents, seq_len, P, C, U) : nullptr;
  return out;
}

SpShard SpShard::of_rank(int index) const {
  SpShard out = *this;
  out.logical_index = index;
  return out;
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

Tensor shard_sequence(const Tensor& global, SequenceLayout layout, int P, int C, int logical_index, int U,
                      const ChunkAssignment* chunks) {
  check_sequence_tensor(global, "shard_sequence");
  const std::int64_t N = global.size(1);
  const std::vector<TokenRun> runs = rank_tokens(layout, N, P, C, logical_index, U, chunks);
  Shape local_shape = global.shape();
  local_shape[1] = N / P;
  Tensor local = Tensor::empty(local_shape, global.dtype(), global.device());
  copy_runs("shard_sequence", runs, global, local, /*to_local=*/true);
  return local;
}

Tensor unshard_sequence(const std::vector<Tensor>& locals, SequenceLayout layout, int P, int C, int U,
                        const ChunkAssignment* chunks) {
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
    copy_runs("unshard_sequence", rank_tokens(layout, N, P, C, l, U, chunks), locals[static_cast<std::size_t>(l)],
              global, /*to_local=*/false);
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

// The attention call of one (query run, key run) block, at the runs' global positions.
kernels::AttentionShape run_call(TokenRun query, TokenRun key, bool causal) {
  kernels::AttentionShape call;
  call.q_len = query.length;
  call.kv_len = key.length;
  call.causal = causal;
  call.q_offset = query.start;
  call.kv_offset = key.start;
  return call;
}

// Pairs (q, k) with k ≤ q between the runs: a causal attention call's pairs (kernel_args.h).
std::int64_t causal_run_pairs(TokenRun query, TokenRun key) {
  return kernels::attention_pairs(run_call(query, key, /*causal=*/true));
}

std::int64_t total_length(const std::vector<TokenRun>& runs) {
  std::int64_t total = 0;
  for (const TokenRun& run : runs) total += run.length;
  return total;
}

// Pairs of one (query run, key run) block inside the documents.
std::int64_t document_run_pairs(TokenRun query, TokenRun key, bool causal, const DocumentBounds& documents) {
  return ops::document_pairs(run_call(query, key, causal), documents);
}

}  // namespace

std::int64_t unmasked_pairs(const std::vector<TokenRun>& query_runs, const std::vector<TokenRun>& key_runs,
                            bool causal, const DocumentBounds& documents) {
  if (documents.empty() && !causal) return total_length(query_runs) * total_length(key_runs);
  std::int64_t pairs = 0;
  for (const TokenRun& q : query_runs) {
    for (const TokenRun& k : key_runs) {
      pairs += documents.empty() ? causal_run_pairs(q, k) : document_run_pairs(q, k, causal, documents);
    }
  }
  return pairs;
}

// ---- work balance ------------------------------------------------------------------------------

std::int64_t wallfacer_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       bool causal, const DocumentBounds& documents, const ChunkAssignment* chunks) {
  // Logical indices are the sp indices of the collectives-intra placement.
  const comm::WallFacerLayout grid(P, C, comm::Placement::collectives_intra);
  const std::vector<TokenRun> queries = team_tokens(layout, N, P, C, grid.team(logical_index), chunks);
  std::int64_t pairs = 0;
  for (int step = 0; step < grid.ring_size(); ++step) {
    const int kv_team = grid.kv_team_at_step(logical_index, step);
    pairs += unmasked_pairs(queries, team_tokens(layout, N, P, C, kv_team, chunks), causal, documents);
  }
  return pairs;
}

std::int64_t ring_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int rank, bool causal,
                                  const DocumentBounds& documents, const ChunkAssignment* chunks) {
  return wallfacer_rank_work_pairs(layout, N, P, /*C=*/1, rank, causal, documents, chunks);
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

// ---- packed documents: the zigzag balanced by attention work -----------------------------------

namespace {

// The candidates for g, finest first. WallFacer's members split their team's K/V teams, and a
// document's work sits mostly in its own chunk (the team meeting its own K/V): teams of C > 1 need
// chunks much finer than the documents to spread it over the members.
constexpr int kChunksPerPair[] = {64, 32, 16, 8, 4, 2, 1};
constexpr int kMaxChunksPerPairOneMember = 8;  // C = 1: a rank is its team, 8 balance within 0.1%
// No chunk finer than this many tokens (unless g = 1): every (query chunk, key chunk) pair is its own
// attention call, and chunks below a kernel's tile (64 on the CPU and in the CUDA kernels) turn one
// call into thousands of tiny ones — a 256-token LLaMA-tiny sequence under WallFacer C = 2 was cut
// into 1-token chunks and trained 5x slower than unpacked.
constexpr std::int64_t kMinChunkTokens = 64;
// C > 1: at most this many swaps refine the dealt assignment (refine_by_swaps).
constexpr int kMaxSwapRounds = 64;
// Each round first tries this many of the chunks that give the busiest rank the most pairs.
constexpr std::size_t kSwapCandidates = 8;

int zigzag_teams(int P, int C, int U) { return P / U / C; }  // of a checked (P, C, U)

std::int64_t max_team_work(const ChunkAssignment& a, const std::vector<std::int64_t>& work) {
  std::int64_t most = 0;
  for (const auto& team : a.team_chunks) {
    std::int64_t load = 0;
    for (int c : team) load += work[static_cast<std::size_t>(c)];
    most = std::max(most, load);
  }
  return most;
}

// Deals `items` (groups of chunks) heaviest first (then by index) to the least loaded team (then
// the lowest) that holds fewer than `capacity` items; each team's chunks end up ascending.
ChunkAssignment deal(const std::vector<std::vector<int>>& items, const std::vector<std::int64_t>& work, int T,
                     std::size_t capacity, std::int64_t chunk_tokens) {
  std::vector<std::int64_t> item_work;
  for (const auto& item : items) {
    std::int64_t w = 0;
    for (int c : item) w += work[static_cast<std::size_t>(c)];
    item_work.push_back(w);
  }
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return item_work[a] > item_work[b]; });
  ChunkAssignment out{chunk_tokens, std::vector<std::vector<int>>(static_cast<std::size_t>(T))};
  std::vector<std::int64_t> load(static_cast<std::size_t>(T), 0);
  std::vector<std::size_t> held(static_cast<std::size_t>(T), 0);
  for (std::size_t i : order) {
    std::size_t best = load.size();
    for (std::size_t t = 0; t < load.size(); ++t) {
      if (held[t] < capacity && (best == load.size() || load[t] < load[best])) best = t;
    }
    load[best] += item_work[i];
    ++held[best];
    for (int c : items[i]) out.team_chunks[best].push_back(c);
  }
  for (auto& team : out.team_chunks) std::sort(team.begin(), team.end());
  return out;
}

// The causal pairs inside documents between two chunks of `chunk_tokens` tokens: one entry per
// (query chunk, key chunk ≤ it) that a document spans, per row with its own boundaries (a list
// shared by every row once), as block_attention counts them.
struct ChunkPairWork {
  int query = 0, key = 0;
  std::int64_t pairs = 0;
};
std::vector<ChunkPairWork> chunk_pair_work(const DocumentBounds& documents, std::int64_t chunk_tokens) {
  const bool shared = std::all_of(documents.begin(), documents.end(), [&](const auto& b) { return b == documents[0]; });
  std::vector<ChunkPairWork> out;
  for (std::size_t r = 0; r < (shared ? std::size_t{1} : documents.size()); ++r) {
    const std::vector<std::int64_t>& bounds = documents[r];
    for (std::size_t d = 0; d + 1 < bounds.size(); ++d) {
      const std::int64_t start = bounds[d], end = bounds[d + 1];
      const auto part = [&](std::int64_t c) {  // chunk c's tokens inside the document
        const std::int64_t from = std::max(start, c * chunk_tokens), to = std::min(end, (c + 1) * chunk_tokens);
        return TokenRun{from, to - from};
      };
      for (std::int64_t q = start / chunk_tokens; q * chunk_tokens < end; ++q) {
        for (std::int64_t k = start / chunk_tokens; k <= q; ++k) {
          out.push_back({static_cast<int>(q), static_cast<int>(k), causal_run_pairs(part(q), part(k))});
        }
      }
    }
  }
  return out;
}

// Which WallFacer rank (of W in teams of C) computes the pairs of a query chunk of team tq and a
// key chunk of team tk: a query team meets each K/V team on exactly one of its members.
class PairOwners {
 public:
  PairOwners(int W, int C) : T_(W / C), owner_(static_cast<std::size_t>(T_ * T_), -1) {
    const comm::WallFacerLayout grid(W, C, comm::Placement::collectives_intra);
    for (int l = 0; l < W; ++l) {
      for (int step = 0; step < grid.ring_size(); ++step) {
        owner_[static_cast<std::size_t>(grid.team(l) * T_ + grid.kv_team_at_step(l, step))] = l;
      }
    }
  }
  std::size_t operator()(int tq, int tk) const {
    const int l = owner_[static_cast<std::size_t>(tq * T_ + tk)];
    WF_CHECK(l >= 0, "balanced_chunk_assignment: no WallFacer rank meets K/V team {} with team {}'s queries", tk, tq);
    return static_cast<std::size_t>(l);
  }

 private:
  int T_;
  std::vector<int> owner_;
};

// Each chunk's team under `a`.
std::vector<int> chunk_teams(const ChunkAssignment& a) {
  std::vector<int> team_of(a.team_chunks.size() * a.team_chunks[0].size());
  for (std::size_t t = 0; t < a.team_chunks.size(); ++t) {
    for (int c : a.team_chunks[t]) team_of[static_cast<std::size_t>(c)] = static_cast<int>(t);
  }
  return team_of;
}

// Each WallFacer rank's pairs (wallfacer_rank_work_pairs, from the chunk pairs), chunk c on team
// team_of[c].
std::vector<std::int64_t> rank_loads(const std::vector<int>& team_of, const std::vector<ChunkPairWork>& pairs,
                                     const PairOwners& owner, int W) {
  std::vector<std::int64_t> work(static_cast<std::size_t>(W), 0);
  for (const ChunkPairWork& p : pairs) {
    work[owner(team_of[static_cast<std::size_t>(p.query)], team_of[static_cast<std::size_t>(p.key)])] += p.pairs;
  }
  return work;
}

// The busiest WallFacer rank's pairs under `a`.
std::int64_t max_rank_work(const ChunkAssignment& a, const std::vector<ChunkPairWork>& pairs, const PairOwners& owner,
                           int W) {
  const std::vector<std::int64_t> work = rank_loads(chunk_teams(a), pairs, owner, W);
  return *std::max_element(work.begin(), work.end());
}

// Chunks dealt heaviest first (then by index), each to the team with room for 2g that leaves the
// busiest WallFacer rank least loaded (then the lowest team), counting its pairs with the chunks
// already dealt.
ChunkAssignment deal_by_rank(const std::vector<std::int64_t>& work, const std::vector<ChunkPairWork>& pairs,
                             const PairOwners& owner, int W, int T, int g, std::int64_t chunk_tokens) {
  const auto K = work.size();
  std::vector<std::vector<const ChunkPairWork*>> touching(K);  // the pairs each chunk is part of
  for (const ChunkPairWork& p : pairs) {
    touching[static_cast<std::size_t>(p.query)].push_back(&p);
    if (p.key != p.query) touching[static_cast<std::size_t>(p.key)].push_back(&p);
  }
  std::vector<std::size_t> order(K);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return work[a] > work[b]; });
  std::vector<int> team_of(K, -1), held(static_cast<std::size_t>(T), 0);
  std::vector<std::int64_t> load(static_cast<std::size_t>(W), 0);
  ChunkAssignment out{chunk_tokens, std::vector<std::vector<int>>(static_cast<std::size_t>(T))};
  for (std::size_t c : order) {
    int best = -1;
    std::int64_t best_most = 0;
    std::vector<std::int64_t> best_load;
    for (int t = 0; t < T; ++t) {
      if (held[static_cast<std::size_t>(t)] >= 2 * g) continue;
      std::vector<std::int64_t> trial = load;
      team_of[c] = t;
      for (const ChunkPairWork* p : touching[c]) {
        const int tq = team_of[static_cast<std::size_t>(p->query)], tk = team_of[static_cast<std::size_t>(p->key)];
        if (tq >= 0 && tk >= 0) trial[owner(tq, tk)] += p->pairs;
      }
      team_of[c] = -1;
      const std::int64_t most = *std::max_element(trial.begin(), trial.end());
      if (best < 0 || most < best_most) {
        best = t;
        best_most = most;
        best_load = std::move(trial);
      }
    }
    team_of[c] = best;
    load = std::move(best_load);
    ++held[static_cast<std::size_t>(best)];
    out.team_chunks[static_cast<std::size_t>(best)].push_back(static_cast<int>(c));
  }
  for (auto& team : out.team_chunks) std::sort(team.begin(), team.end());
  return out;
}

// Swaps of two chunks between teams that lower the busiest WallFacer rank's work (C > 1), best
// first, until none does or `max_rounds` are made. The deals above place each chunk once, by the
// work of the chunks placed before it; a member's work is its share of its team's pairs with the
// K/V teams it meets, which a chunk placed later changes, so the busiest member is left a few
// percent over the mean (5-12% for 36 documents in 64K at P = 8 and 16). A swap keeps every team's
// chunk count. Each round tries the chunks that give the busiest rank the most pairs (the
// heaviest kSwapCandidates, then four times as many while none helps) against every chunk of
// another team, and keeps the swap whose loads are lowest: the busiest first, then the sum of
// squares (so that a swap that relieves one of several equally busy ranks counts). Ties go to
// the lowest chunk indices: a pure function of its inputs.
ChunkAssignment refine_by_swaps(const ChunkAssignment& start, const std::vector<ChunkPairWork>& pairs,
                                const PairOwners& owner, int W, int max_rounds) {
  const std::size_t T = start.team_chunks.size(), K = T * start.team_chunks[0].size();
  std::vector<int> team_of = chunk_teams(start);
  const auto team = [&](std::size_t c) { return static_cast<std::size_t>(team_of[c]); };
  const auto rank = [&](std::size_t tq, std::size_t tk) { return owner(static_cast<int>(tq), static_cast<int>(tk)); };
  // Per chunk c and team t: the pairs of c's queries with keys of t (as_query) and of c's keys
  // with queries of t (as_key), the pairs of c with itself apart; and every pair by its two chunks.
  // A swap then moves O(T) sums instead of every pair of the two chunks' documents.
  std::vector<std::int64_t> as_query(K * T, 0), as_key(K * T, 0), self(K, 0);
  std::vector<std::int64_t> load = rank_loads(team_of, pairs, owner, W);
  std::vector<std::vector<std::size_t>> touching(K);  // indices of the pairs each chunk is part of
  std::unordered_map<std::uint64_t, std::int64_t> between;  // (query chunk, key chunk) -> pairs
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const ChunkPairWork& p = pairs[i];
    const auto q = static_cast<std::size_t>(p.query), k = static_cast<std::size_t>(p.key);
    if (q == k) {
      self[q] += p.pairs;
      continue;
    }
    as_query[q * T + team(k)] += p.pairs;
    as_key[k * T + team(q)] += p.pairs;
    touching[q].push_back(i);
    touching[k].push_back(i);
    between[q * K + k] += p.pairs;
  }
  const auto pairs_between = [&](std::size_t q, std::size_t k) {
    const auto it = between.find(q * K + k);
    return it == between.end() ? std::int64_t{0} : it->second;
  };
  // The loads `l` after chunks a (of team ta) and b (of team tb) trade teams.
  const auto swap_loads = [&](std::size_t a, std::size_t b, std::vector<std::int64_t>& l) {
    const std::size_t ta = team(a), tb = team(b);
    const std::int64_t ab = pairs_between(a, b), ba = pairs_between(b, a);
    for (std::size_t t = 0; t < T; ++t) {  // each chunk's pairs with the others' chunks, not with each other
      const std::int64_t a_q = as_query[a * T + t] - (t == tb ? ab : 0), a_k = as_key[a * T + t] - (t == tb ? ba : 0);
      const std::int64_t b_q = as_query[b * T + t] - (t == ta ? ba : 0), b_k = as_key[b * T + t] - (t == ta ? ab : 0);
      l[rank(ta, t)] += b_q - a_q;
      l[rank(tb, t)] += a_q - b_q;
      l[rank(t, ta)] += b_k - a_k;
      l[rank(t, tb)] += a_k - b_k;
    }
    l[rank(ta, ta)] += self[b] - self[a];
    l[rank(tb, tb)] += self[a] - self[b];
    l[rank(ta, tb)] += ba - ab;  // a's queries with b's keys now meet on (tb, ta), and the reverse
    l[rank(tb, ta)] += ab - ba;
  };
  using Score = std::pair<std::int64_t, __int128>;  // (busiest rank, sum of squares)
  const auto score = [](const std::vector<std::int64_t>& l) {
    Score out{0, 0};
    for (std::int64_t x : l) out.first = std::max(out.first, x), out.second += static_cast<__int128>(x) * x;
    return out;
  };
  bool changed = false;
  for (int round = 0; round < max_rounds; ++round) {
    // The chunks that give the busiest rank the most pairs (then the lowest index).
    const auto busiest = static_cast<std::size_t>(std::max_element(load.begin(), load.end()) - load.begin());
    std::vector<std::int64_t> on_busiest(K, 0);
    for (const ChunkPairWork& p : pairs) {
      const auto q = static_cast<std::size_t>(p.query), k = static_cast<std::size_t>(p.key);
      if (rank(team(q), team(k)) != busiest) continue;
      on_busiest[q] += p.pairs;
      if (k != q) on_busiest[k] += p.pairs;
    }
    std::vector<std::size_t> heaviest(K);
    std::iota(heaviest.begin(), heaviest.end(), std::size_t{0});
    std::sort(heaviest.begin(), heaviest.end(), [&](std::size_t x, std::size_t y) {
      return on_busiest[x] != on_busiest[y] ? on_busiest[x] > on_busiest[y] : x < y;
    });
    Score best = score(load);
    std::size_t best_a = K, best_b = K;
    std::vector<std::int64_t> trial(load.size());
    // The heaviest few first; only when none of them helps, the next ones (a busiest rank that
    // every heavy chunk's swap would make worse is left to its lighter chunks).
    for (std::size_t i = 0, tried = kSwapCandidates; best_a == K && i < K && on_busiest[heaviest[i]] > 0;
         tried *= 4) {
      for (; i < std::min(K, tried) && on_busiest[heaviest[i]] > 0; ++i) {
        const std::size_t a = heaviest[i];
        for (std::size_t b = 0; b < K; ++b) {
          if (team_of[b] == team_of[a]) continue;
          std::copy(load.begin(), load.end(), trial.begin());
          swap_loads(a, b, trial);
          const Score s = score(trial);
          if (s < best) best = s, best_a = a, best_b = b;
        }
      }
    }
    if (best_a == K) break;
    // Take the swap: the loads, then the per-team sums of every chunk paired with a or b.
    swap_loads(best_a, best_b, load);
    for (const auto& [c, from, to] : {std::tuple{best_a, team(best_a), team(best_b)},
                                      std::tuple{best_b, team(best_b), team(best_a)}}) {
      for (std::size_t i : touching[c]) {
        const ChunkPairWork& p = pairs[i];
        const auto q = static_cast<std::size_t>(p.query), k = static_cast<std::size_t>(p.key);
        std::vector<std::int64_t>& side = q == c ? as_key : as_query;  // the partner's sums by c's team
        const std::size_t partner = q == c ? k : q;
        side[partner * T + from] -= p.pairs;
        side[partner * T + to] += p.pairs;
      }
    }
    std::swap(team_of[best_a], team_of[best_b]);
    changed = true;
  }
  if (!changed) return start;
  ChunkAssignment out{start.chunk_tokens, std::vector<std::vector<int>>(T)};
  for (std::size_t c = 0; c < K; ++c) out.team_chunks[team(c)].push_back(static_cast<int>(c));
  return out;
}

}  // namespace

int chunks_per_pair(std::int64_t N, int P, int C, int U) {
  check_sequence_length(SequenceLayout::zigzag, N, P, C, U);
  const std::int64_t multiple = sequence_length_multiple(SequenceLayout::zigzag, P, C, U);
  const std::int64_t pair_chunks = 2 * static_cast<std::int64_t>(zigzag_teams(P, C, U));
  for (int g : kChunksPerPair) {
    const bool fine_enough = C > 1 || g <= kMaxChunksPerPairOneMember;
    const bool coarse_enough = N / (pair_chunks * g) >= kMinChunkTokens;
    if (fine_enough && coarse_enough && N % std::lcm(multiple, pair_chunks * g) == 0) return g;
  }
  return 1;
}

ChunkAssignment zigzag_chunk_assignment(std::int64_t N, int P, int C, int U) {
  check_sequence_length(SequenceLayout::zigzag, N, P, C, U);
  const int T = zigzag_teams(P, C, U);
  ChunkAssignment out{N / (2 * static_cast<std::int64_t>(T)), {}};
  for (int t = 0; t < T; ++t) out.team_chunks.push_back(zigzag_team_chunks(T, 1, t));
  return out;
}

namespace {
// The causal pairs of each of `chunks` equal chunks, counted where the chunk holds the queries or
// (by_keys) the keys.
std::vector<std::int64_t> chunk_pairs(const DocumentBounds& documents, std::int64_t N, std::int64_t chunks,
                                      bool by_keys, const char* what) {
  WF_CHECK(N >= 1 && chunks >= 1 && N % chunks == 0, "{}: {} chunks do not cut N = {} tokens evenly", what, chunks,
           N);
  ops::check_document_bounds(what, documents, static_cast<std::int64_t>(documents.size()), N);
  const std::int64_t length = N / chunks;
  const std::vector<TokenRun> all{{0, N}};
  std::vector<std::int64_t> work;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::vector<TokenRun> chunk{{c * length, length}};
    work.push_back(unmasked_pairs(by_keys ? all : chunk, by_keys ? chunk : all, /*causal=*/true, documents));
  }
  return work;
}
}  // namespace

std::vector<std::int64_t> chunk_work_pairs(const DocumentBounds& documents, std::int64_t N, std::int64_t chunks) {
  return chunk_pairs(documents, N, chunks, /*by_keys=*/false, "chunk_work_pairs");
}

std::vector<std::int64_t> chunk_key_work_pairs(const DocumentBounds& documents, std::int64_t N, std::int64_t chunks) {
  return chunk_pairs(documents, N, chunks, /*by_keys=*/true, "chunk_key_work_pairs");
}

// Deals single chunks heaviest first by query and key work together (then by index) to the team
// with room (2g chunks) whose busier side, queries or keys, stays lowest (then the lowest team).
ChunkAssignment deal_both_sides(const std::vector<std::int64_t>& work, const std::vector<std::int64_t>& key_work,
                                int T, std::size_t capacity, std::int64_t chunk_tokens) {
  std::vector<int> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  const auto weight = [&](int c) { return work[static_cast<std::size_t>(c)] + key_work[static_cast<std::size_t>(c)]; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return weight(a) > weight(b); });
  ChunkAssignment out{chunk_tokens, std::vector<std::vector<int>>(static_cast<std::size_t>(T))};
  std::vector<std::int64_t> queries(static_cast<std::size_t>(T), 0), keys(static_cast<std::size_t>(T), 0);
  for (int c : order) {
    const std::size_t i = static_cast<std::size_t>(c);
    std::size_t best = queries.size();
    std::int64_t best_load = 0;
    for (std::size_t t = 0; t < queries.size(); ++t) {
      if (out.team_chunks[t].size() >= capacity) continue;
      const std::int64_t load = std::max(queries[t] + work[i], keys[t] + key_work[i]);
      if (best == queries.size() || load < best_load) best = t, best_load = load;
    }
    queries[best] += work[i];
    keys[best] += key_work[i];
    out.team_chunks[best].push_back(c);
  }
  for (auto& team : out.team_chunks) std::sort(team.begin(), team.end());
  return out;
}

ChunkAssignment balanced_chunk_assignment(const DocumentBounds& documents, std::int64_t N, int P, int C, int U) {
  // One causal document per row: the zigzag gives every rank the same work already.
  const std::vector<std::int64_t> whole{0, N};
  if (std::all_of(documents.begin(), documents.end(), [&](const auto& b) { return b == whole; })) {
    return zigzag_chunk_assignment(N, P, C, U);
  }
  const int g = chunks_per_pair(N, P, C, U), T = zigzag_teams(P, C, U);
  const int K = 2 * T * g;
  const std::int64_t chunk_tokens = N / K;
  const std::vector<std::int64_t> work = chunk_work_pairs(documents, N, K);

  // 1. The token zigzag at this granularity: team t holds the g chunks of zigzag chunks t and 2T−1−t.
  ChunkAssignment zigzag{chunk_tokens, std::vector<std::vector<int>>(static_cast<std::size_t>(T))};
  for (int t = 0; t < T; ++t) {
    for (int half : zigzag_team_chunks(T, 1, t)) {
      for (int i = 0; i < g; ++i) zigzag.team_chunks[static_cast<std::size_t>(t)].push_back(half * g + i);
    }
  }
  // 2. Folded pairs: the lightest chunk with the heaviest, the second with the second, ...
  std::vector<int> by_work(static_cast<std::size_t>(K));
  std::iota(by_work.begin(), by_work.end(), 0);
  std::stable_sort(by_work.begin(), by_work.end(), [&](int a, int b) {
    return work[static_cast<std::size_t>(a)] < work[static_cast<std::size_t>(b)];
  });
  std::vector<std::vector<int>> pairs, singles;
  for (int i = 0; i < K / 2; ++i) {
    pairs.push_back({by_work[static_cast<std::size_t>(i)], by_work[static_cast<std::size_t>(K - 1 - i)]});
  }
  // 3. LPT over single chunks.
  for (int c = 0; c < K; ++c) singles.push_back({c});

  const ChunkAssignment candidates[] = {zigzag, deal(pairs, work, T, static_cast<std::size_t>(g), chunk_tokens),
                                        deal(singles, work, T, 2 * static_cast<std::size_t>(g), chunk_tokens)};
  // The busiest rank's work: its team's (C = 1), or its own share of it (C > 1: the K/V teams it
  // meets on WallFacer's sub-rings, which need C² | P/U; a layout without them counts teams).
  const int W = P / U;
  const bool per_rank = C > 1 && W % (C * C) == 0;
  const std::vector<ChunkPairWork> pair_work = per_rank ? chunk_pair_work(documents, chunk_tokens)
                                                        : std::vector<ChunkPairWork>{};
  const std::optional<PairOwners> owner = per_rank ? std::optional<PairOwners>(PairOwners(W, C)) : std::nullopt;
  const auto cost = [&](const ChunkAssignment& a) {
    return per_rank ? max_rank_work(a, pair_work, *owner, W) : max_team_work(a, work);
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < std::size(candidates); ++i) {
    if (cost(candidates[i]) < cost(candidates[best])) best = i;
  }
  if (!per_rank) {
    // A team's keys matter too: WallFacer's backward computes on the K/V's holder, so there a
    // team's work is the pairs whose KEY it holds (a chunk's key work is large early in a
    // document, where its query work is small). Among the candidates whose busiest team (by
    // queries) is no busier than the token zigzag's, keep the one whose busiest team by queries
    // or by keys does least; the same total on both sides makes the two comparable.
    const std::vector<std::int64_t> key_work = chunk_key_work_pairs(documents, N, K);
    const auto both = [&](const ChunkAssignment& a) { return std::max(cost(a), max_team_work(a, key_work)); };
    const std::int64_t zigzag_cost = cost(candidates[0]);
    for (std::size_t i = 0; i < std::size(candidates); ++i) {
      if (cost(candidates[i]) <= zigzag_cost && both(candidates[i]) < both(candidates[best])) best = i;
    }
    // 5. the chunks dealt by both sides at once, when that does better still.
    ChunkAssignment by_both = deal_both_sides(work, key_work, T, 2 * static_cast<std::size_t>(g), chunk_tokens);
    if (cost(by_both) <= zigzag_cost && both(by_both) < both(candidates[best])) return by_both;
  }
  if (per_rank) {  // 4. (C > 1) dealt by the busiest rank's work, when that beats the three above
    ChunkAssignment by_rank = deal_by_rank(work, pair_work, *owner, W, T, g, chunk_tokens);
    const bool by_rank_better = cost(by_rank) < cost(candidates[best]);
    const ChunkAssignment& dealt = by_rank_better ? by_rank : candidates[best];
    // 6. then swaps between teams while they relieve the busiest rank.
    ChunkAssignment refined = refine_by_swaps(dealt, pair_work, *owner, W, kMaxSwapRounds);
    if (cost(refined) < cost(dealt)) return refined;
    if (by_rank_better) return by_rank;
  }
  // The zigzag in its own chunks, so that a layout that need not change is the standard one.
  return best == 0 ? zigzag_chunk_assignment(N, P, C, U) : candidates[best];
}

std::shared_ptr<const ChunkAssignment> document_chunks(SequenceLayout layout, const DocumentBounds& documents,
                                                       std::int64_t N, int P, int C, int U) {
  if (layout != SequenceLayout::zigzag || documents.empty()) return nullptr;
  return std::make_shared<const ChunkAssignment>(balanced_chunk_assignment(documents, N, P, C, U));
}

double work_imbalance(const std::vector<std::int64_t>& per_rank) {
  if (per_rank.empty()) return 0;
  const std::int64_t most = *std::max_element(per_rank.begin(), per_rank.end());
  const double mean = double(std::accumulate(per_rank.begin(), per_rank.end(), std::int64_t{0})) /
                      double(per_rank.size());
  return mean > 0 ? double(most) / mean - 1.0 : 0.0;
}

}  // namespace wf::parallel

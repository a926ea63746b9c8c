#pragma once
// Which tokens of a sequence each sequence-parallel rank holds, and how much causal attention
// work that gives each rank. Pure arithmetic (plus two tensor copies for the data loader and
// the tests); no MPI and no attention math. Ring, Ulysses and WallFacer attention all build on
// it. docs/sequence-layout.md draws the layouts for P = 8, C = 2 and derives the rules.
//
// Ranks are named by their LOGICAL sp index l = t·C + m (team t, member m), which is what
// comm::WallFacerLayout::logical_index returns; the placement only decides where l lives.
// Ring attention and Ulysses are the case C = 1 (l = the rank).
//
// The ulysses-wallfacer hybrid (U > 1 below) composes two layouts: WallFacer's over W = P/U
// logical shards (teams of C), and inside each shard — in its storage order, which is what the
// Ulysses all-to-all gathers — the same layout with C = 1 over the shard's U Ulysses ranks.
// Rank l = s·U + u holds the tokens at storage indices rank_tokens(layout, N/W, U, 1, u) of
// shard s = rank_tokens(layout, N, W, C, s). U = 1 is WallFacer's layout; U = P (W = 1, whose
// one shard is the whole sequence in order) is Ulysses'.
#include <cstdint>
#include <string_view>
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf::parallel {

enum class SequenceLayout {
  contiguous,  // rank l holds tokens [l·N/P, (l+1)·N/P): full masks (DiT, encoders)
  zigzag,      // team t holds chunks t and 2T−1−t of 2T: balances causal masks (GPT)
};

// "contiguous" / "zigzag".
std::string_view sequence_layout_name(SequenceLayout layout);
// The inverse of sequence_layout_name; throws wf::Error naming the valid values.
SequenceLayout parse_sequence_layout(std::string_view name);
// The layout an attention mask needs: zigzag balances causal work over the ranks, a full mask
// is balanced as it is (contiguous). The one place this choice is made.
SequenceLayout layout_for_mask(bool causal);

// Global token positions [start, start + length).
struct TokenRun {
  std::int64_t start = 0;
  std::int64_t length = 0;
  friend bool operator==(const TokenRun&, const TokenRun&) = default;
};

// N must be a multiple of this for the layout to split N tokens over P ranks in teams of C:
// contiguous: P; zigzag: lcm(P, 2T) with T = P/C (the member slices need P | N, the 2T chunks
// need 2T | N). With U > 1 (the hybrid): lcm(the multiple over W = P/U in teams of C, W times
// the C = 1 multiple over U), which is P (contiguous) or 2P (zigzag). Throws wf::Error unless
// P ≥ 1, C ≥ 1, U ≥ 1, U divides P and C divides P/U.
std::int64_t sequence_length_multiple(SequenceLayout layout, int P, int C, int U = 1);
// Throws wf::Error naming N, P, C (and U), the layout and the nearest valid N values unless
// N > 0 is a multiple of sequence_length_multiple(layout, P, C, U).
void check_sequence_length(SequenceLayout layout, std::int64_t N, int P, int C, int U = 1);

// The tokens logical rank l holds, in storage order, as maximal contiguous runs.
//   contiguous: one run [l·N/P, (l+1)·N/P).
//   zigzag: chunks of N/(2T) tokens; team t's storage is chunk t then chunk 2T−1−t, and member
//     m holds the m-th N/P slice of that storage, so a slice may straddle the two chunks (two
//     runs; one when the chunks touch, t = T−1). C = 1 is the usual {r, 2P−1−r} zigzag.
//   U > 1 (the hybrid): the composition in the header comment, l = s·U + u.
std::vector<TokenRun> rank_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index, int U = 1);
// What team t holds after the team all-gather: its members' runs in member order, merged.
std::vector<TokenRun> team_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int team);
// The global position of each of rank l's N/P tokens, in storage order (for RoPE and learned
// position embeddings, which must follow true positions, never storage order).
std::vector<std::int64_t> position_ids(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       int U = 1);
// Expands runs into positions.
std::vector<std::int64_t> run_positions(const std::vector<TokenRun>& runs);

// global [B, N, ...] (CPU, any dtype) → rank l's [B, N/P, ...]: a copy of its runs, in storage
// order. The sequence is dim 1. Raw data copies: no autograd history is recorded.
Tensor shard_sequence(const Tensor& global, SequenceLayout layout, int P, int C, int logical_index, int U = 1);
// The inverse: locals[l] is logical rank l's [B, N/P, ...]; returns the global [B, N, ...].
Tensor unshard_sequence(const std::vector<Tensor>& locals, SequenceLayout layout, int P, int C, int U = 1);

// Which tokens a rank holds under a sequence-parallel strategy: the arguments the functions above
// take (ring and Ulysses lay out with C = 1 over the physical sp index; WallFacer with the grid's
// C over the rank's logical index; the hybrid with the grid's C and U over
// ProcessGrid::sp_logical_index). parallel::sp_shard (sp_attention.h) makes it from the grid;
// data loaders and tests shard with it.
struct SpShard {
  SequenceLayout layout = SequenceLayout::contiguous;
  std::int64_t seq_len = 0;
  int P = 1, C = 1, logical_index = 0;
  int U = 1;  // the hybrid's Ulysses degree; 1 for every other strategy
  std::vector<TokenRun> runs() const { return rank_tokens(layout, seq_len, P, C, logical_index, U); }
  Tensor shard(const Tensor& global) const { return shard_sequence(global, layout, P, C, logical_index, U); }
};

// ---- block masks -------------------------------------------------------------------------

// How the attention of one (query run, key run) block must be computed.
enum class BlockMask {
  full,    // every key ≤ every query (or no causal mask): plain attention, causal = false
  causal,  // some pairs kept, some dropped: attention with causal = true and the runs' starts as
           // q_offset / kv_offset (the diagonal chunk pair is the lower-triangular case)
  skip,    // every key after every query: not computed, not launched
};
std::string_view block_mask_name(BlockMask mask);
// Classifies by global positions. Empty runs are skipped.
BlockMask block_mask(TokenRun query, TokenRun key, bool causal);

// Exact number of (query, key) pairs attention computes: key ≤ query when causal, all pairs
// otherwise. The position version is the plain reference (any order, any positions); the run
// version is the closed form the work functions use.
std::int64_t unmasked_pairs(const std::vector<std::int64_t>& query_positions,
                            const std::vector<std::int64_t>& key_positions, bool causal);
std::int64_t unmasked_pairs(const std::vector<TokenRun>& query_runs, const std::vector<TokenRun>& key_runs,
                            bool causal);

// ---- work balance --------------------------------------------------------------------------

// Attention pairs logical rank l computes in one WallFacer forward: at each ring step i in
// [0, G) its team's C·N/P queries meet the keys of team kv_team_at_step(l, i) (logical
// indices, comm::WallFacerLayout). Throws wf::Error unless C² divides P.
std::int64_t wallfacer_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       bool causal);
// Standard ring attention (C = 1): rank r's queries meet every rank's keys once.
std::int64_t ring_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int rank, bool causal);

// Chunk-level accounting (the algorithm doc's "tests count blocks"): a sequence cut into equal
// chunks, numbered by position. Work is counted in HALF blocks so it stays an integer: a query
// chunk after a key chunk costs 2, the diagonal (same chunk) 1, a query chunk before 0.
std::int64_t causal_half_blocks(const std::vector<int>& query_chunks, const std::vector<int>& key_chunks);
// The zigzag pairing: team t of T = P/C holds chunks {t, 2T−1−t} of 2T.
std::vector<int> zigzag_team_chunks(int P, int C, int team);
// Half blocks logical rank l computes over the G ring steps of a causal WallFacer forward when
// team τ holds chunks team_chunks[τ] (P/C entries). With the zigzag pairing every (query team,
// key team) pair costs exactly 4 half blocks, so every rank does 4·G.
std::int64_t wallfacer_rank_work_half_blocks(int P, int C, int logical_index,
                                             const std::vector<std::vector<int>>& team_chunks);
std::int64_t wallfacer_rank_work_half_blocks(int P, int C, int logical_index);  // zigzag pairing

}  // namespace wf::parallel

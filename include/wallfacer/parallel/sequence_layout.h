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
#include <memory>
#include <string_view>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/attention.h"

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

// ---- packed documents: the zigzag balanced by attention work ------------------------------
// With packed documents (AttentionOptions::doc_bounds) a token's causal work is its position
// inside its document, not in the sequence, so the token zigzag no longer gives the teams equal
// work. A chunk assignment replaces the zigzag's pairing: the sequence is cut into K = 2T·g equal
// chunks (T = P/(U·C) teams of WallFacer's layout, g chunks per zigzag half) and team t holds
// team_chunks[t], 2g chunks in ascending order, as its storage; member slicing and the hybrid's
// Ulysses split then work on that storage exactly as on the zigzag's. docs/sequence-layout.md §6.
struct ChunkAssignment {
  std::int64_t chunk_tokens = 0;             // N / K
  std::vector<std::vector<int>> team_chunks;  // per team, its chunks (numbered by position), ascending
  friend bool operator==(const ChunkAssignment&, const ChunkAssignment&) = default;
};

// g: the largest of 64, 32, 16, 8, 4, 2, 1 (at most 8 when C = 1, and none that cuts chunks below
// 64 tokens, a kernel tile: each chunk pair is its own attention call) for which N is a multiple of
// lcm(sequence_length_multiple(zigzag, P, C, U), 2T·g) (T = P/(U·C)), so the chunks are whole
// tokens and every split the layout makes stays valid; 1 (the zigzag's own chunks) when no larger
// one fits. C > 1 takes finer chunks: a WallFacer member meets only some K/V teams, and most of a
// document's work is in its own chunk. N must be valid for the zigzag.
int chunks_per_pair(std::int64_t N, int P, int C, int U = 1);
// The token zigzag as an assignment: K = 2T chunks, team t holds {t, 2T−1−t}. Layouts with it
// equal layouts without one, token for token.
ChunkAssignment zigzag_chunk_assignment(std::int64_t N, int P, int C, int U = 1);
// The causal attention work of each of `chunks` equal chunks: the (query, key) pairs whose
// query lies in the chunk and whose key is at or before it in the same document, summed over the
// rows that have their own boundaries (block_attention's count of a block: a shared list once).
std::vector<std::int64_t> chunk_work_pairs(const DocumentBounds& documents, std::int64_t N, std::int64_t chunks);
// The same by keys: the pairs whose key lies in the chunk (the work of the K/V's holder, which
// WallFacer's backward computes).
std::vector<std::int64_t> chunk_key_work_pairs(const DocumentBounds& documents, std::int64_t N, std::int64_t chunks);
// The assignment that balances the ranks' work for the documents of a micro batch (every row's
// list, or one shared), with g = chunks_per_pair. The work of a rank: with C = 1 its team's, the
// sum of the team's chunk_work_pairs; with C > 1 its wallfacer_rank_work_pairs (the K/V teams it
// meets; the team's work where C² does not divide P/U, which WallFacer refuses). Candidates, the
// first with the smallest busiest rank wins (so never worse than the token zigzag, and exactly
// it when that is as good, e.g. for one causal document per row):
//   1. the token zigzag (returned as zigzag_chunk_assignment);
//   2. folded pairs: the chunks sorted by work (then index), the heaviest paired with the lightest,
//      the K/2 pairs dealt heaviest first to the least loaded team with room for g pairs (g = 1:
//      the classic heaviest-with-lightest pairing);
//   3. LPT: the chunks dealt heaviest first to the least loaded team with room for 2g chunks;
//   4. (C > 1, taken only when it beats 1-3) the chunks dealt heaviest first to the team with room
//      that leaves the busiest rank least loaded, counting their pairs with the chunks dealt.
// With C = 1 the keys count too (WallFacer's backward works on the K/V's holder): among 1-3 whose
// busiest team is no busier than the zigzag's, the one whose busiest team by queries or by keys
// (chunk_key_work_pairs) does least; then 5., the chunks dealt heaviest first (queries and keys
// together) to the team with room whose busier side stays lowest, when it does better still.
// Ties go to the lower chunk, pair or team index: a pure function of its arguments, so the data
// loader and every strategy derive the same layout from the same documents. wf::Error for
// bounds that are not valid for N (ops::check_document_bounds' rules) or an N the zigzag refuses.
ChunkAssignment balanced_chunk_assignment(const DocumentBounds& documents, std::int64_t N, int P, int C, int U = 1);
// The layout a batch of packed documents runs with: the balanced assignment for the zigzag with
// documents; none (nullptr: the layout as it is) for the contiguous layout or no documents. The
// one rule the loader and the strategies apply.
std::shared_ptr<const ChunkAssignment> document_chunks(SequenceLayout layout, const DocumentBounds& documents,
                                                       std::int64_t N, int P, int C, int U = 1);
// max / mean − 1 of per-rank work (0 when it is all zero): the imbalance bench attention prints.
double work_imbalance(const std::vector<std::int64_t>& per_rank);

// The tokens logical rank l holds, in storage order, as maximal contiguous runs.
//   contiguous: one run [l·N/P, (l+1)·N/P).
//   zigzag: chunks of N/(2T) tokens; team t's storage is chunk t then chunk 2T−1−t, and member
//     m holds the m-th N/P slice of that storage, so a slice may straddle the two chunks (two
//     runs; one when the chunks touch, t = T−1). C = 1 is the usual {r, 2P−1−r} zigzag.
//   U > 1 (the hybrid): the composition in the header comment, l = s·U + u.
// With `chunks` (zigzag only; null: as above) team t's storage is its assigned chunks in
// ascending order instead of chunks t and 2T−1−t; the rest is the same. wf::Error when the
// assignment does not fit (N, P, C, U) or every chunk is not held once.
std::vector<TokenRun> rank_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index, int U = 1,
                                  const ChunkAssignment* chunks = nullptr);
// What team t holds after the team all-gather: its members' runs in member order, merged.
std::vector<TokenRun> team_tokens(SequenceLayout layout, std::int64_t N, int P, int C, int team,
                                  const ChunkAssignment* chunks = nullptr);
// The global position of each of rank l's N/P tokens, in storage order (for RoPE and learned
// position embeddings, which must follow true positions, never storage order).
std::vector<std::int64_t> position_ids(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       int U = 1, const ChunkAssignment* chunks = nullptr);
// Expands runs into positions.
std::vector<std::int64_t> run_positions(const std::vector<TokenRun>& runs);

// global [B, N, ...] (CPU, any dtype) → rank l's [B, N/P, ...]: a copy of its runs, in storage
// order. The sequence is dim 1. Raw data copies: no autograd history is recorded.
Tensor shard_sequence(const Tensor& global, SequenceLayout layout, int P, int C, int logical_index, int U = 1,
                      const ChunkAssignment* chunks = nullptr);
// The inverse: locals[l] is logical rank l's [B, N/P, ...]; returns the global [B, N, ...].
Tensor unshard_sequence(const std::vector<Tensor>& locals, SequenceLayout layout, int P, int C, int U = 1,
                        const ChunkAssignment* chunks = nullptr);

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
  // Whether the strategy balances packed documents by work (document_chunks). Every strategy
  // does but Ulysses alone, which gathers the whole sequence per head group: its work is the
  // same whatever tokens a rank holds (sp_shard sets false for it).
  bool balance_documents = true;
  // The chunk assignment of the current batch (for_documents); null: the layout as it is.
  std::shared_ptr<const ChunkAssignment> chunks = nullptr;

  std::vector<TokenRun> runs() const { return rank_tokens(layout, seq_len, P, C, logical_index, U, chunks.get()); }
  Tensor shard(const Tensor& global) const {
    return shard_sequence(global, layout, P, C, logical_index, U, chunks.get());
  }
  // This shard for a batch of packed documents (one list per row, or one shared): with the
  // assignment document_chunks gives when balance_documents, else unchanged.
  SpShard for_documents(const DocumentBounds& documents) const;
  // The same shard for another logical index (to place every rank's tokens).
  SpShard of_rank(int index) const;
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
// With `documents` (checked bounds) only pairs inside one document count, summed over the rows
// with their own boundaries: block_attention's count for the same runs.
std::int64_t unmasked_pairs(const std::vector<TokenRun>& query_runs, const std::vector<TokenRun>& key_runs,
                            bool causal, const DocumentBounds& documents = {});

// ---- work balance --------------------------------------------------------------------------

// Attention pairs logical rank l computes in one WallFacer forward: at each ring step i in
// [0, G) its team's C·N/P queries meet the keys of team kv_team_at_step(l, i) (logical
// indices, comm::WallFacerLayout). Throws wf::Error unless C² divides P. With packed `documents`
// and the layout's `chunks` (as rank_tokens), the pairs inside documents (unmasked_pairs).
std::int64_t wallfacer_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int C, int logical_index,
                                       bool causal, const DocumentBounds& documents = {},
                                       const ChunkAssignment* chunks = nullptr);
// Standard ring attention (C = 1): rank r's queries meet every rank's keys once.
std::int64_t ring_rank_work_pairs(SequenceLayout layout, std::int64_t N, int P, int rank, bool causal,
                                  const DocumentBounds& documents = {}, const ChunkAssignment* chunks = nullptr);

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

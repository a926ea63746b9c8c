#pragma once
// The GPT batch loader: each (dp, sp) rank gets exactly its slice of every global batch, in the
// sequence layout its attention strategy stores (zigzag for causal), with the true position of
// every token. The order is a pure function of (seed, step): get(step, micro) needs no state,
// so a run resumes at any step by asking for that step, and every rank computes its slice
// without talking to the others. docs/data.md ("Batches") describes the sampling.
//
// Samples: sample w is the window of tokens [w·N, w·N + N + 1) (N = seq_len); consecutive
// windows share one token so every one of the N positions has a next-token target.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/data/sample_order.h"
#include "wallfacer/parallel/sequence_layout.h"

namespace wf::data {

// Random access to a stream of token ids.
class TokenSource {
 public:
  virtual ~TokenSource();
  virtual std::int64_t size() const = 0;  // tokens
  // Tokens [start, start + count) into out[0, count), widened to int64; wf::Error when the range
  // is not inside [0, size()).
  virtual void read(std::int64_t start, std::int64_t count, std::int64_t* out) const = 0;
  // For messages: "token file 'data/x/train.bin'", "synthetic tokens (vocab 256, seed 1)".
  virtual std::string describe() const = 0;
  // Where each document starts (the loader packs them: LoaderOptions::pack), read when asked, so a
  // loader that does not pack never opens it. wf::Error naming the source and the fix when it
  // has none (the default) or its index is damaged or belongs to other tokens.
  virtual std::shared_ptr<const DocumentIndex> documents() const;
};

// A token file from `wallfacer prepare-text`, memory-mapped (TokenFile). Its documents() are the
// index beside it (document_index_path), checked against the file: the same token count, and
// where the index names an end-of-text token, that token closing the documents it samples.
std::shared_ptr<TokenSource> open_token_file_source(const std::string& path);

// Seeded uniform random tokens for benchmarks at any length: token i is a function of
// (seed, i) alone (Philox), so any range is read in O(count) time and O(1) memory, and the same
// token comes back however the reads are chunked. Ids are uniform in [0, vocab_size) (bias below
// vocab_size / 2^64). Size it to what the run reads (steps · global batch · seq_len + 1), or
// load it with shuffle = false: a shuffled loader keeps an epoch's permutation, 8 bytes a sample.
std::shared_ptr<TokenSource> make_synthetic_source(std::int64_t vocab_size, std::int64_t num_tokens,
                                                   std::uint64_t seed);

struct LoaderOptions {
  std::int64_t seq_len = 0;           // N: tokens per sequence (global, before sp)
  std::int64_t micro_batch_size = 1;  // sequences per dp rank per micro step
  std::int64_t grad_accum_steps = 1;  // micro steps per optimizer step
  int dp_size = 1, dp_rank = 0;
  // This rank's tokens of each sequence (parallel::sp_shard); the default P = 1 is the whole
  // sequence. shard.seq_len must equal seq_len.
  parallel::SpShard shard;
  std::uint64_t seed = 0;
  bool shuffle = true;  // false: the samples in file order (validation)
  // Packed documents (data.pack): the same windows, with the source's documents() as each row's
  // boundaries and positions inside documents. false: every row is one document.
  bool pack = false;
};

struct Batch {
  Tensor inputs;     // [micro_batch_size, n_local] i64: this rank's tokens of each sequence, in storage order
  Tensor targets;    // [micro_batch_size, n_local] i64: the token after each of those positions
  // [n_local] i64: the true position in the sequence of each local token. Packed, the layout
  // balances the documents' attention work (parallel::SpShard::for_documents of doc_bounds), so
  // which tokens a rank holds can change from batch to batch.
  Tensor positions;
  std::int64_t global_tokens = 0;  // target tokens in the whole global batch of this step (loss averaging)
  std::vector<std::int64_t> samples;  // the window index of each row (logs, tests)
  // Packed documents (docs/data.md "Packed documents"); without packing, each row is one document:
  // doc_positions rows equal positions and doc_bounds rows are {0, N}.
  Tensor doc_positions;  // [micro_batch_size, n_local] i64: each local token's position inside its document
  // Per row, the documents of the whole global sequence as cumulative lengths (cu_seqlens):
  // 0 = b_0 < b_1 < ... < b_k = N; document j is the global positions [b_j, b_j+1).
  std::vector<std::vector<std::int64_t>> doc_bounds;
};

// The sample order of a loader's options over `samples_per_epoch` samples: its micro batch,
// accumulation, dp slice, seed and shuffling (the token loader's, and any other source's).
SampleOrderOptions sample_order_options(const LoaderOptions& options, std::int64_t samples_per_epoch);

class BatchLoader {
 public:
  // Throws wf::Error naming the option and the rule when the options are inconsistent, and
  // naming the source, its token count and the fix when it holds no full sample.
  BatchLoader(std::shared_ptr<TokenSource> source, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(BatchLoader&&) noexcept;
  BatchLoader& operator=(BatchLoader&&) noexcept;

  // This rank's micro batch `micro` (in [0, grad_accum_steps)) of optimizer step `step` (≥ 0).
  // Stateless: any step in any order gives the same batch, so resuming needs only the step.
  // Thread-safe.
  Batch get(std::int64_t step, std::int64_t micro) const;

  // Samples in the whole job per optimizer step: micro_batch_size · dp_size · grad_accum_steps.
  std::int64_t global_batch_size() const;
  // Full windows of the source: (size − 1) / seq_len.
  std::int64_t samples_per_epoch() const;
  // The epoch the first sample of `step` comes from.
  std::int64_t epoch(std::int64_t step) const;
  // Index in the job's sample stream of row b of (step, micro) on this dp rank:
  // ((step·grad_accum + micro)·dp_size + dp_rank)·micro_batch_size + b.
  std::int64_t stream_index(std::int64_t step, std::int64_t micro, std::int64_t b) const;
  // The window the sample stream holds at `index`: epoch e = index / S covers every window once,
  // in a seeded permutation of epoch e (natural order without shuffle).
  std::int64_t sample_at(std::int64_t stream_index) const;

  const LoaderOptions& options() const { return options_; }
  const TokenSource& source() const { return *source_; }

 private:
  std::shared_ptr<TokenSource> source_;
  LoaderOptions options_;
  // The layout of an unpacked batch; a packed one is laid out per batch by its documents' work.
  std::vector<parallel::TokenRun> runs_;
  std::vector<std::int64_t> positions_;
  std::shared_ptr<const DocumentIndex> documents_;  // when packing
  std::int64_t samples_per_epoch_ = 0;
  std::unique_ptr<SampleOrder> order_;  // built once the source's sample count is known
};

}  // namespace wf::data

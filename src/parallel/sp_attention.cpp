// The shard each rank holds under a strategy, and the factory.
#include "wallfacer/parallel/sp_attention.h"

#include "src/parallel/ring_attention.h"
#include "src/parallel/ulysses_attention.h"
#include "src/parallel/ulysses_wallfacer_attention.h"
#include "wallfacer/core/error.h"

#if __has_include("src/parallel/wallfacer_attention.h")
#include "src/parallel/wallfacer_attention.h"
#define WF_HAVE_WALLFACER_ATTENTION 1
#endif

namespace wf::parallel {
namespace {

#ifndef WF_HAVE_WALLFACER_ATTENTION
// Until src/parallel/wallfacer_attention.h exists: a clear error instead of a link failure.
std::shared_ptr<nn::AttentionStrategy> make_wallfacer_attention(const SpAttentionConfig&, comm::CommGrid&) {
  WF_FAIL("sp strategy 'wallfacer' is not built into this library yet; use 'ring' or 'ulysses'");
}
#endif

}  // namespace

SpShard sp_shard(const SpAttentionConfig& config, const comm::CommGrid& grid) {
  const comm::ProcessGrid& g = grid.grid();
  SpShard shard;
  shard.layout = config.layout;
  shard.seq_len = config.seq_len;
  shard.P = g.group_size("sp");
  const int sp_index = g.group_rank("sp");
  if (config.strategy == SpStrategy::wallfacer || config.strategy == SpStrategy::ulysses_wallfacer) {
    shard.C = g.config().C;
    shard.U = config.strategy == SpStrategy::ulysses_wallfacer ? g.config().U : 1;
    shard.logical_index = g.sp_logical_index(sp_index);
  } else {
    shard.logical_index = sp_index;  // ring and Ulysses: C = 1 over the physical sp index
  }
  // Ulysses gathers the whole sequence per head group: its work is balanced whatever it holds.
  shard.balance_documents = config.strategy != SpStrategy::ulysses;
  check_sequence_length(shard.layout, shard.seq_len, shard.P, shard.C, shard.U);
  return shard;
}

std::int64_t sp_rank_work_pairs(SpStrategy strategy, SequenceLayout layout, std::int64_t N, int P, int C, int U,
                                int logical_index, bool causal, const DocumentBounds& documents,
                                const ChunkAssignment* chunks) {
  const auto whole_sequence = [&] { return unmasked_pairs({{0, N}}, {{0, N}}, causal, documents); };
  switch (strategy) {
    case SpStrategy::ring: return ring_rank_work_pairs(layout, N, P, logical_index, causal, documents, chunks);
    case SpStrategy::ulysses: return whole_sequence();
    case SpStrategy::wallfacer:
      return wallfacer_rank_work_pairs(layout, N, P, C, logical_index, causal, documents, chunks);
    case SpStrategy::ulysses_wallfacer:
      if (U == P) return whole_sequence();  // Ulysses itself
      return wallfacer_rank_work_pairs(layout, N, P / U, C, logical_index / U, causal, documents, chunks);
  }
  WF_FAIL("unknown sp strategy {}", static_cast<int>(strategy));
}

std::shared_ptr<nn::AttentionStrategy> make_sp_attention(const SpAttentionConfig& config, comm::CommGrid& grid) {
  comm::Group& sp = grid.group("sp");
  // A silently smaller group would train without sequence parallelism (Megatron-Bridge #2667).
  WF_CHECK(sp.size() == grid.grid().config().sp,
           "sp attention: the 'sp' group has {} ranks but the configuration asks for sp = {}", sp.size(),
           grid.grid().config().sp);
  switch (config.strategy) {
    case SpStrategy::ring: return make_ring_attention(config, sp);
    case SpStrategy::ulysses: return make_ulysses_attention(config, sp);
    case SpStrategy::wallfacer: return make_wallfacer_attention(config, grid);
    case SpStrategy::ulysses_wallfacer: return make_ulysses_wallfacer_attention(config, grid);
  }
  WF_FAIL("unknown sp strategy {}", static_cast<int>(config.strategy));
}

}  // namespace wf::parallel

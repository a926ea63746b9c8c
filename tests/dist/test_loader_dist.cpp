// The batch loader on a real grid: every rank builds its loader from its (dp, sp) coordinates
// and parallel::sp_shard, and what the ranks hold together — gathered over the sp and dp
// groups — is exactly the global batch a single-process loader describes. Layouts depend on the
// world size W: all dp, all sp, dp 2 × sp W/2, and WallFacer teams (C = 2) at W = 4 and 8.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist_testing.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/parallel/sp_attention.h"

using wf::Tensor;
using wf::comm::CommGrid;
using wf::comm::ParallelConfig;
using wf::comm::ProcessGrid;
using wf::data::BatchLoader;
using wf::data::LoaderOptions;
using wf::parallel::SequenceLayout;
using wf::parallel::SpStrategy;
using namespace wf::test;

namespace {

using Tokens = std::vector<std::int64_t>;

constexpr std::int64_t kMicroBatch = 2, kGradAccum = 2, kWindows = 13;

ParallelConfig dp_sp(int dp, int sp, int C, wf::comm::Placement placement = wf::comm::Placement::collectives_intra) {
  ParallelConfig config;
  config.dp = dp, config.sp = sp, config.C = C, config.placement = placement;
  return config;
}

LoaderOptions options_of(std::int64_t N, int dp, int dp_rank, wf::parallel::SpShard shard) {
  return {.seq_len = N, .micro_batch_size = kMicroBatch, .grad_accum_steps = kGradAccum, .dp_size = dp,
          .dp_rank = dp_rank, .shard = shard, .seed = 2024};
}

void check_layout(const ParallelConfig& config) {
  const int W = runtime().world_size();
  const std::int64_t N = 6 * W;  // a multiple of every layout's length rule below
  const ProcessGrid grid(config, W, runtime().rank());
  CommGrid comm_grid(grid);
  const int dp = grid.group_size("dp"), dp_rank = grid.group_rank("dp");
  const auto source = wf::data::make_synthetic_source(5000, kWindows * N + 1, 77);
  for (SpStrategy strategy : {SpStrategy::ring, SpStrategy::wallfacer}) {
    for (SequenceLayout layout : {SequenceLayout::zigzag, SequenceLayout::contiguous}) {
      INFO(fmt::format("rank {}: dp {} sp {} C {} {} {}", runtime().rank(), config.dp, config.sp, config.C,
                       wf::parallel::sp_strategy_name(strategy), wf::parallel::sequence_layout_name(layout)));
      const wf::parallel::SpShard shard = wf::parallel::sp_shard({strategy, layout, N}, comm_grid);
      const BatchLoader loader(source, options_of(N, dp, dp_rank, shard));
      // The whole sequences of this dp rank, from a loader without sequence parallelism.
      const BatchLoader whole(source, options_of(N, dp, dp_rank, {layout, N, 1, 1, 0}));
      for (std::int64_t step : {0, 1, 4}) {  // 4·dp samples a step over 13 windows: epochs straddled
        for (std::int64_t micro = 0; micro < kGradAccum; ++micro) {
          const wf::data::Batch batch = loader.get(step, micro);
          const wf::data::Batch full = whole.get(step, micro);
          // Locally: this rank's slice of the full rows, at its true positions.
          CHECK(mismatch(batch.inputs, shard.shard(full.inputs)).empty());
          CHECK(mismatch(batch.targets, shard.shard(full.targets)).empty());
          CHECK(batch.positions.to_vector<std::int64_t>() == wf::parallel::run_positions(shard.runs()));
          CHECK(batch.global_tokens == kMicroBatch * kGradAccum * config.dp * N);
          CHECK(batch.samples == full.samples);

          // Over the sp group: the tokens, placed at the positions that travel with them, are the
          // full rows, and every position is held once.
          wf::comm::Group& sp = comm_grid.group("sp");
          const Tokens positions = sp.all_gather(batch.positions).to_vector<std::int64_t>();
          const Tokens inputs = sp.all_gather(batch.inputs).to_vector<std::int64_t>();
          const Tokens targets = sp.all_gather(batch.targets).to_vector<std::int64_t>();
          const Tokens full_inputs = full.inputs.to_vector<std::int64_t>();
          const Tokens full_targets = full.targets.to_vector<std::int64_t>();
          const std::int64_t n_local = N / sp.size();
          Tokens placed_inputs(full_inputs.size(), -1), placed_targets(full_targets.size(), -1);
          std::vector<int> held(static_cast<std::size_t>(N), 0);
          for (int member = 0; member < sp.size(); ++member) {
            for (std::int64_t j = 0; j < n_local; ++j) {
              const std::int64_t p = positions[static_cast<std::size_t>(member * n_local + j)];
              ++held[static_cast<std::size_t>(p)];
              for (std::int64_t b = 0; b < kMicroBatch; ++b) {
                const auto from = static_cast<std::size_t>((member * kMicroBatch + b) * n_local + j);
                placed_inputs[static_cast<std::size_t>(b * N + p)] = inputs[from];
                placed_targets[static_cast<std::size_t>(b * N + p)] = targets[from];
              }
            }
          }
          CHECK(held == std::vector<int>(static_cast<std::size_t>(N), 1));
          CHECK(placed_inputs == full_inputs);
          CHECK(placed_targets == full_targets);

          // Over the dp group: the ranks' rows are the step's samples in stream order.
          const Tensor samples = Tensor::from_vector(batch.samples, {kMicroBatch});
          const Tokens all_samples = comm_grid.group("dp").all_gather(samples).to_vector<std::int64_t>();
          Tokens expected;
          for (std::int64_t i = 0; i < dp * kMicroBatch; ++i) {
            expected.push_back(loader.sample_at((step * kGradAccum + micro) * dp * kMicroBatch + i));
          }
          CHECK(all_samples == expected);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("batch loader: every (dp, sp) rank holds exactly its slice of the global batch", "[dist][data]") {
  const int W = runtime().world_size();
  check_layout(dp_sp(W, 1, 1));  // all data parallel
  check_layout(dp_sp(1, W, 1));  // all sequence parallel
  if (W % 2 == 0 && W >= 4) check_layout(dp_sp(2, W / 2, 1));
  if (W == 4) check_layout(dp_sp(1, 4, 2));
  if (W == 8) {
    check_layout(dp_sp(2, 4, 2));
    check_layout(dp_sp(1, 8, 2));
    check_layout(dp_sp(1, 8, 2, wf::comm::Placement::p2p_intra));
  }
}

// The step reads the host once per logged step (train/loss_totals.h, Trainer::fit): a short run
// with log_every = k counts at most steps / k + 3 host synchronisations (host_sync_count): one
// read of the pending losses per logged step, plus 3 outside the steps: the peak-FLOP/s
// broadcast fit() starts with, and the end-of-run checkpoint's finite check and its agreement.
// The losses read late are the ones read at every step, bit for bit.
#include <filesystem>
#include <vector>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/train/trainer.h"

using namespace wf::test;

namespace {

struct Run {
  std::vector<double> losses;
  std::int64_t host_syncs = 0;
};

Run fit_with_log_every(std::int64_t log_every, std::int64_t steps) {
  const int world = runtime().world_size();
  wf::config::RunConfig c = small_gpt_run(world, 1, false, "wf-host-syncs-" + std::to_string(log_every));
  c.train.steps = steps;
  c.train.log_every = log_every;
  c.log.peak_gflops = 1.0;  // no measurement
  std::filesystem::remove_all(c.checkpoint.dir);
  runtime().world().barrier();
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(c.parallel.grid(), world, runtime().rank()));
  wf::train::Trainer trainer(c, grid);
  const std::int64_t before = wf::host_sync_count();
  trainer.fit();
  Run run;
  run.host_syncs = wf::host_sync_count() - before;
  for (const auto& step : trainer.history()) run.losses.push_back(step.loss);
  return run;
}

}  // namespace

TEST_CASE("a training run reads the host once per logged step", "[dist][train][host_syncs]") {
  constexpr std::int64_t kSteps = 6;
  const Run every_step = fit_with_log_every(1, kSteps);
  const Run every_third = fit_with_log_every(3, kSteps);
  INFO("host syncs: log_every 1 " << every_step.host_syncs << ", log_every 3 " << every_third.host_syncs);
  CHECK(every_third.host_syncs <= kSteps / 3 + 3);
  CHECK(every_step.host_syncs <= kSteps + 3);
  // The counter sees the reads: logging every step reads at every step.
  CHECK(every_step.host_syncs - every_third.host_syncs == kSteps - kSteps / 3);
  REQUIRE(every_third.losses.size() == static_cast<std::size_t>(kSteps));
  CHECK(every_third.losses == every_step.losses);  // bit for bit
  for (double loss : every_third.losses) CHECK(loss > 0.0);
}

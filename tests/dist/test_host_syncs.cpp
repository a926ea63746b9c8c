// The step reads the host once per logged step (train/loss_totals.h, Trainer::fit): a short run
// with log_every = k counts exactly steps / k + 3 host synchronisations (host_sync_count): one
// read of the pending losses and gradient norms per logged step, plus 3 outside the steps: the
// peak-FLOP/s broadcast fit() starts with, and the end-of-run checkpoint's finite check (its
// agreement included) and its read of the optimizer's step counts. The losses read late are the
// ones read at every step, bit for bit. A non-finite gradient norm skips the update on the device:
// a diverging run reads no more, and its skips are counted when the norms are read.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/train/grad_sync.h"
#include "wallfacer/train/loss_totals.h"
#include "wallfacer/train/trainer.h"

using wf::Tensor;
using namespace wf::test;

namespace {

struct Run {
  std::vector<double> losses;
  std::int64_t host_syncs = 0;
};

wf::config::RunConfig host_syncs_run(std::int64_t log_every, std::int64_t steps, const std::string& name) {
  wf::config::RunConfig c = small_gpt_run(runtime().world_size(), 1, false, "wf-host-syncs-" + name);
  c.train.steps = steps;
  c.train.log_every = log_every;
  c.log.peak_gflops = 1.0;  // no measurement
  if (runtime().rank() == 0) std::filesystem::remove_all(c.checkpoint.dir);  // one rank: no race
  runtime().world().barrier();
  return c;
}

Run fit_with_log_every(std::int64_t log_every, std::int64_t steps) {
  const wf::config::RunConfig c = host_syncs_run(log_every, steps, std::to_string(log_every));
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(c.parallel.grid(), runtime().world_size(), runtime().rank()));
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
  CHECK(every_third.host_syncs == kSteps / 3 + 3);
  CHECK(every_step.host_syncs == kSteps + 3);
  // The counter sees the reads: logging every step reads at every step.
  CHECK(every_step.host_syncs - every_third.host_syncs == kSteps - kSteps / 3);
  REQUIRE(every_third.losses.size() == static_cast<std::size_t>(kSteps));
  CHECK(every_third.losses == every_step.losses);  // bit for bit
  for (double loss : every_third.losses) CHECK(loss > 0.0);
}

// [one_world]: the Trainer's reads do not depend on the layout, and its 1030 steps took 53 s under
// the sanitizers at each world size; ctest runs it in the 1-rank world only (tests/CMakeLists.txt).
TEST_CASE("a long interval between logged steps is read in parts of 1024 steps",
          "[dist][train][host_syncs][one_world]") {
  // log_every beyond the run: the steps' losses and norms are held on the device, read when 1024
  // of them wait (step 1024) and at the run's last step (1030, logged), besides the 3 reads
  // outside the steps. Every step's loss is filled in.
  constexpr std::int64_t kSteps = 1030;
  const Run run = fit_with_log_every(1000000, kSteps);
  CHECK(run.host_syncs == 2 + 3);
  REQUIRE(run.losses.size() == static_cast<std::size_t>(kSteps));
  for (double loss : run.losses) CHECK(loss > 0.0);
}

TEST_CASE("a diverging run skips its updates on the device and learns of them at the next logged step",
          "[dist][train][host_syncs]") {
  // lr 1e300 makes the first update's weights infinite: every later norm is NaN. With log_every 4,
  // max_skipped_steps 2 is reached at step 3 and noticed at step 4's read, the one read of steps 1-4.
  wf::config::RunConfig c = host_syncs_run(4, 8, "diverging");
  c.train.lr = 1e300;
  c.train.warmup_steps = 0;
  c.train.max_skipped_steps = 2;
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(c.parallel.grid(), runtime().world_size(), runtime().rank()));
  wf::train::Trainer trainer(c, grid);
  const std::int64_t before = wf::host_sync_count();
  CHECK_THROWS_WITH(trainer.fit(), Catch::Contains("step 3: the gradient norm has not been finite for 2 steps in a "
                                                   "row (the last NaN), train.max_skipped_steps = 2"));
  CHECK(wf::host_sync_count() - before == 1 + 1);  // the peak-FLOP/s broadcast, then steps 1-4's read
  CHECK(trainer.step() == 4);
  REQUIRE(trainer.history().size() == 4);
  CHECK(std::isfinite(trainer.history()[0].grad_norm));
  for (std::size_t i = 1; i < 4; ++i) CHECK(!std::isfinite(trainer.history()[i].grad_norm));
  // Only step 1 applied: the saved step count is the updates applied.
  for (std::size_t i = 0; i < trainer.optimizer().num_params(); ++i) CHECK(trainer.optimizer().step_count(i) == 1);
}

TEST_CASE("the loss totals and gradient normalisation on the test device equal the host's bit for bit",
          "[dist][train][testdev]") {
  auto group = world_group("t.device_loss_totals");
  const int me = group->rank();
  const wf::Shape shapes[] = {{7, 3}, {5}};
  for (const bool ignore_all : {false, true}) {
    INFO("every target ignored: " << ignore_all);
    // Three microbatches' loss sums (f32, as the models give them) and counts, different per rank.
    std::vector<Tensor> sums;
    std::vector<std::int64_t> counts;
    for (int micro = 0; micro < 3; ++micro) {
      sums.push_back(wf::reshape(input_of(me, {1}, wf::DType::f32, 40 + micro), {}));
      counts.push_back(ignore_all ? 0 : 17 * (me + 1) + micro);
    }
    // The host path as it was: LossTotals and normalise_gradients (grad_sync.h).
    std::vector<Tensor> host_params, cpu_params, dev_params;
    for (std::size_t i = 0; i < std::size(shapes); ++i) {
      const Tensor grad = input_of(me, shapes[i], wf::DType::f32, 50 + i);
      for (auto* list : {&host_params, &cpu_params, &dev_params}) {
        const wf::Device device = list == &dev_params ? wf::Device::test() : wf::Device::cpu();
        Tensor p = Tensor::zeros(shapes[i], wf::DType::f32, device);
        p.set_grad(grad.to(device).clone());
        list->push_back(p);
      }
    }
    wf::train::LossTotals host;
    for (int micro = 0; micro < 3; ++micro) host.add(sums[micro].item(), counts[micro]);
    const double host_loss = wf::train::normalise_gradients(*group, host_params, host);

    std::vector<double> losses;
    for (auto* params : {&cpu_params, &dev_params}) {
      const wf::Device device = params->front().device();
      wf::train::DeviceLossTotals totals(device);
      for (int micro = 0; micro < 3; ++micro) totals.add(sums[micro].to(device), counts[micro]);
      const Tensor loss = wf::train::normalise_gradients_on_device(*group, *params, totals);
      losses.push_back(loss.to(wf::Device::cpu()).data<double>()[0]);
      for (std::size_t i = 0; i < params->size(); ++i) {
        const Tensor got = (*params)[i].grad().to(wf::Device::cpu()), want = host_params[i].grad();
        CHECK(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()) == 0);
      }
    }
    CHECK(std::memcmp(&losses[0], &host_loss, sizeof host_loss) == 0);
    CHECK(std::memcmp(&losses[1], &host_loss, sizeof host_loss) == 0);
  }
}

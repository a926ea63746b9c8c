// DiT trains to the same numbers under every layout: a one-process run and a parallel run of the
// same config (synthetic images; noise, times and label dropout drawn at each sample's global
// index) give the same loss and gradient norm at each of 3 steps, within f32 summation order
// (1e-5 relative for the loss, 1e-4 for the norm). The layouts at 4 ranks cover each dimension
// and a pair with sp: sp 4 WallFacer C 2 (full mask, contiguous shards), sp 4 Ulysses, sp 4 ring
// with the checkpoint at the attention output, dp 2 x sp 2, tp 2 x sp 2 and pp 2 x sp 2.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "dist_testing.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/train/trainer.h"

using namespace wf::test;

namespace {

struct DitLayout {
  int dp = 1, tp = 1, pp = 1, sp = 1, C = 1;
  wf::parallel::SpStrategy strategy = wf::parallel::SpStrategy::wallfacer;
  bool checkpoint_attention = false;
  std::string name() const {
    return fmt::format("dit: dp{} x tp{} x pp{} x sp{} {} C={}{}", dp, tp, pp, sp,
                       wf::parallel::sp_strategy_name(strategy), C, checkpoint_attention ? " + checkpoint" : "");
  }
};

wf::config::RunConfig dit_run(const DitLayout& l, const std::string& tag) {
  wf::config::RunConfig c;
  c.model.set_name("dit");
  c.model.set("image_size", 8);
  c.model.set("in_channels", 1);
  c.model.set("patch_size", 2);  // 16 patches
  c.model.set("d_model", 32);
  c.model.set("n_layer", 2);
  c.model.set("n_head", 4);
  c.model.set("num_classes", 4);
  c.model.set("class_dropout", 0.25);
  c.model.set("checkpoint_attention", l.checkpoint_attention);
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.sp = l.sp;
  c.parallel.C = l.C;
  c.parallel.sp_strategy = l.strategy;
  c.train.seq_len = 16;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 4;
  c.train.steps = 3;
  c.train.lr = 3e-3;
  c.train.warmup_steps = 1;
  c.train.seed = 91;
  c.data.source = wf::config::DataSource::synthetic;
  c.checkpoint.dir = (std::filesystem::temp_directory_path() / fmt::format("wf-dit-parity-{}", tag)).string();
  c.log.dir = c.checkpoint.dir;
  return c;
}

}  // namespace

TEST_CASE("dit parity: sp (WallFacer, Ulysses, ring), dp x sp, tp x sp and pp x sp match one process",
          "[dist][train][dit]") {
  const int world = runtime().world_size();
  if (world != 4) return;  // the layouts are for 4 ranks
  using wf::parallel::SpStrategy;
  const std::vector<DitLayout> layouts = {
      {.sp = 4, .C = 2},
      {.sp = 4, .strategy = SpStrategy::ulysses},
      {.sp = 4, .strategy = SpStrategy::ring, .checkpoint_attention = true},
      {.dp = 2, .sp = 2},
      {.tp = 2, .sp = 2},
      {.pp = 2, .sp = 2},
  };
  for (const DitLayout& layout : layouts) {
    INFO(layout.name());
    const wf::config::RunConfig config = dit_run(layout, "par");
    const wf::config::RunConfig ref_config = dit_run({}, fmt::format("ref-{}", runtime().rank()));
    wf::config::validate(config, world);
    wf::comm::CommGrid ref_grid(wf::comm::ProcessGrid(ref_config.parallel.grid(), 1, 0));
    wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
    wf::train::Trainer reference(ref_config, ref_grid);
    wf::train::Trainer parallel(config, grid);
    for (int step = 1; step <= config.train.steps; ++step) {
      INFO("step " << step);
      const auto r = reference.train_step();
      const auto p = parallel.train_step();
      CHECK(std::abs(p.loss - r.loss) <= 1e-5 * std::abs(r.loss));
      CHECK(std::abs(p.grad_norm - r.grad_norm) <= 1e-4 * r.grad_norm);
    }
  }
}

// Distributed checkpoints across layouts with the real Trainer on a tiny GPT: a checkpoint saved
// at layout A resumes at layout B, and B's checkpoint of the same state exports to the same bytes
// as A's (model and optimizer state, whole tensors); training continues to the uninterrupted
// run's losses (1e-5 relative); at the same layout it resumes bit for bit. A version 3 checkpoint
// (whole tensors) resumes at another layout and exports to the bytes of its version 4 twin. A
// save failing on one rank (a bad piece, another checkpoint.dir) fails on every rank alike.
//
// Pipeline layouts (pp 2, the tied embedding on both end stages, written by the first) take part
// too: saved at pp2 x tp2 x sp2 and resumed at sp8 and at one process, and the other way.
//
// ZeRO stages take part on both sides: the optimizer state is saved as each replica's pieces
// (flat ranges of its tp slice, 8 KiB buckets so that chunks cut through parameters) and loaded
// into the pieces of another stage or layout.
//
// The vocabulary 251 is padded at tp 2 (252) and tp 4 (252): padding rows are dropped on save and
// come back as zeros. "One process" layouts run on rank 0 alone in a world of its own.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "dist_testing.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/models/model.h"
#include "wallfacer/parallel/tensor_parallel.h"
#include "wallfacer/train/sharded_state.h"
#include "wallfacer/train/distributed_checkpoint.h"
#include "wallfacer/train/trainer.h"

using namespace wf::test;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int dp = 1, tp = 1, sp = 1, C = 1;
  int zero = 0;  // ZeRO stage
  int pp = 1;    // pipeline stages (1F1B over the 4 / dp microbatches)
  int world() const { return dp * tp * sp * pp; }
  std::string name() const {
    return fmt::format("dp{} x pp{} x tp{} x sp{} (C {}), ZeRO-{}", dp, pp, tp, sp, C, zero);
  }
};

wf::config::RunConfig run_config(const Layout& layout, const fs::path& dir) {
  wf::config::RunConfig c;
  c.model.set_name("gpt");
  c.model.set("n_layer", 2);
  c.model.set("n_head", 4);
  c.model.set("n_kv_head", 4);  // tp 4 splits whole kv heads
  c.model.set("d_model", 32);
  c.model.set("d_ff", 64);
  c.model.set("vocab_size", 251);
  c.model.set("max_seq_len", 32);
  c.parallel.dp = layout.dp;
  c.parallel.tp = layout.tp;
  c.parallel.sp = layout.sp;
  c.parallel.C = layout.C;
  c.parallel.zero = layout.zero;
  c.parallel.pp = layout.pp;
  c.parallel.grad_bucket_mb = 8.0 / 1024;  // 8 KiB buckets: ZeRO's chunks cut through parameters
  c.train.seq_len = 32;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 4;  // divisible by every dp here (4 at most)
  c.train.steps = 3;
  c.train.lr = 3e-3;
  c.train.warmup_steps = 1;
  c.train.seed = 5;
  c.train.ema_decay = 0.9;  // the EMA is optimizer state: sharded, saved and resharded with the moments
  c.data.source = wf::config::DataSource::synthetic;
  c.checkpoint.dir = dir.string();
  c.log.dir = dir.string();
  return c;
}

// A layout's trainer and its grid; a one-process layout lives on rank 0 only (null elsewhere).
struct Run {
  std::unique_ptr<wf::comm::CommGrid> grid;
  std::unique_ptr<wf::train::Trainer> trainer;
};
Run make_run(const Layout& layout, const fs::path& dir) {
  const int world = runtime().world_size();
  Run run;
  const bool alone = layout.world() == 1;
  const wf::config::RunConfig config = run_config(layout, dir);
  wf::config::validate(config, alone ? 1 : world);
  // Every rank builds the grid (its communicators are created collectively), even of a layout
  // only rank 0 trains.
  run.grid = std::make_unique<wf::comm::CommGrid>(
      wf::comm::ProcessGrid(config.parallel.grid(), alone ? 1 : world, alone ? 0 : runtime().rank()));
  if (alone && runtime().rank() != 0) return run;
  run.trainer = std::make_unique<wf::train::Trainer>(config, *run.grid);
  return run;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A barrier over every rank of the test's world.
void all_ranks_barrier() {
  static const std::shared_ptr<wf::comm::Group> world = world_group("dckpt.world");
  world->barrier();
}

// Saves after 2 steps at `a`, resumes at `b`, checks the exports of both checkpoints of step 2
// are identical, and trains step 3. `expect`: compare the losses with the uninterrupted run at
// `a` (within 1e-5 relative, or bitwise when a and b are one layout).
void check_reshard(const Layout& a, const Layout& b, bool parity) {
  INFO(a.name() << " -> " << b.name());
  const fs::path root = fs::temp_directory_path() / "wf-dist-ckpt";
  const fs::path dir = root / "checkpoints";
  const bool lead = runtime().rank() == 0;
  if (lead) fs::remove_all(root);
  all_ranks_barrier();
  const bool same = a.name() == b.name();
  std::vector<double> expected;
  if (parity) {
    Run uninterrupted = make_run(a, root / "uninterrupted");
    if (uninterrupted.trainer) {
      for (int step = 1; step <= 3; ++step) expected.push_back(uninterrupted.trainer->train_step().loss);
    }
  }
  {
    Run first = make_run(a, dir);
    if (first.trainer) {
      for (int step = 1; step <= 2; ++step) first.trainer->train_step();
      first.trainer->save_checkpoint();
    }
  }
  all_ranks_barrier();
  if (lead) wf::train::export_checkpoint((dir / "step-00000002").string(), (root / "a.safetensors").string(), true);
  all_ranks_barrier();
  Run second = make_run(b, dir);
  if (second.trainer) {
    CHECK(second.trainer->resume());
    CHECK(second.trainer->step() == 2);
    second.trainer->save_checkpoint();  // the same state, as layout b holds it
  }
  all_ranks_barrier();
  if (lead) {
    wf::train::export_checkpoint((dir / "step-00000002").string(), (root / "b.safetensors").string(), true);
    const std::string exported_a = file_bytes(root / "a.safetensors");
    CHECK(exported_a.size() > 100'000);
    CHECK((exported_a == file_bytes(root / "b.safetensors")));
  }
  if (second.trainer) {
    const double loss = second.trainer->train_step().loss;
    if (parity && !expected.empty()) {
      CHECK((same ? loss == expected[2] : std::abs(loss - expected[2]) <= 1e-5 * std::abs(expected[2])));
    }
  }
  all_ranks_barrier();
  if (lead) fs::remove_all(root);
}

}  // namespace

TEST_CASE("distributed checkpoints reshard between layouts and export the same bytes", "[dist][dist_checkpoint]") {
  switch (runtime().world_size()) {
    case 2:
      check_reshard({.tp = 2}, {.dp = 2}, /*parity=*/true);
      check_reshard({.tp = 2}, {.tp = 2}, /*parity=*/true);  // bit for bit
      check_reshard({.dp = 2, .zero = 1}, {.tp = 2}, /*parity=*/true);
      check_reshard({.dp = 2, .zero = 2}, {.dp = 2, .zero = 2}, /*parity=*/true);  // bit for bit
      break;
    case 4:
      check_reshard({}, {.tp = 2, .sp = 2}, /*parity=*/true);  // one process -> tp2 x sp2
      check_reshard({.tp = 2, .sp = 2}, {.tp = 2, .sp = 2}, /*parity=*/true);
      check_reshard({}, {.tp = 2, .sp = 2, .zero = 2}, /*parity=*/true);  // one process -> tp2 x sp2 ZeRO-2
      check_reshard({}, {.dp = 2, .pp = 2}, /*parity=*/true);             // one process -> a pipeline
      check_reshard({.sp = 2, .pp = 2}, {.sp = 2, .pp = 2}, /*parity=*/true);  // bit for bit
      check_reshard({.dp = 2, .zero = 2, .pp = 2}, {.tp = 2, .sp = 2}, /*parity=*/true);
      break;
    case 8:
      check_reshard({.dp = 2, .tp = 2, .sp = 2}, {.sp = 8, .C = 2}, /*parity=*/true);
      check_reshard({.sp = 8}, {.dp = 2, .tp = 4}, /*parity=*/false);
      check_reshard({.dp = 2, .tp = 2, .sp = 2}, {}, /*parity=*/false);  // -> one process
      check_reshard({.dp = 2, .tp = 2, .sp = 2}, {.dp = 2, .tp = 2, .sp = 2}, /*parity=*/true);
      check_reshard({.dp = 4, .sp = 2, .zero = 2}, {.tp = 2, .sp = 4, .zero = 1}, /*parity=*/true);
      check_reshard({.dp = 2, .tp = 2, .sp = 2, .zero = 2}, {}, /*parity=*/false);  // -> one process
      check_reshard({.dp = 2, .tp = 2, .sp = 2, .zero = 2}, {.dp = 2, .tp = 2, .sp = 2, .zero = 2},
                    /*parity=*/true);  // bit for bit
      // A pipeline's checkpoint: saved at pp2 x tp2 x sp2, resumed at sp8 (C 2) and at one process.
      check_reshard({.tp = 2, .sp = 2, .pp = 2}, {.sp = 8, .C = 2}, /*parity=*/true);
      check_reshard({.tp = 2, .sp = 2, .pp = 2}, {}, /*parity=*/true);
      check_reshard({.tp = 2, .sp = 2, .pp = 2}, {.tp = 2, .sp = 2, .pp = 2}, /*parity=*/true);  // bit for bit
      break;
    default:
      WARN("the distributed checkpoint layouts run at 2, 4 and 8 ranks; nothing to check at "
           << runtime().world_size());
      SUCCEED();
  }
}

TEST_CASE("a version 3 checkpoint (whole tensors) resumes at another layout and exports as its version 4 twin",
          "[dist][dist_checkpoint]") {
  if (runtime().world_size() != 2) {
    WARN("the version 3 case runs at 2 ranks (tp 2 -> dp 2); nothing to check at " << runtime().world_size());
    SUCCEED();
    return;
  }
  const fs::path root = fs::temp_directory_path() / "wf-dist-ckpt-v3";
  const bool lead = runtime().rank() == 0;
  if (lead) fs::remove_all(root);
  all_ranks_barrier();
  std::vector<double> expected;
  {
    Run uninterrupted = make_run({.tp = 2}, root / "uninterrupted");
    for (int step = 1; step <= 3; ++step) expected.push_back(uninterrupted.trainer->train_step().loss);
  }
  {
    // What the trainer wrote before format 4: whole tensors gathered over tp, saved by rank 0.
    Run first = make_run({.tp = 2}, root / "v4");
    for (int step = 1; step <= 2; ++step) first.trainer->train_step();
    first.trainer->save_checkpoint();
    const wf::train::WholeState whole =
        wf::train::gather_whole_state(first.trainer->model(), first.trainer->optimizer(), *first.grid);
    if (lead) {
      wf::train::Checkpoint v3;
      v3.step = 2;
      v3.model = whole.model;
      v3.optimizer = whole.optimizer;
      v3.config_yaml = wf::config::to_yaml(first.trainer->config());
      v3.state["rng.offset"] = std::to_string(wf::default_generator().offset());
      v3.state["rng.tensor_parallel.offset"] =
          std::to_string(wf::generator_tracker().state(wf::parallel::kTensorParallelRng).offset);
      wf::train::CheckpointStore((root / "v3").string(), 0).save(v3);
    }
  }
  all_ranks_barrier();
  if (lead) {
    wf::train::export_checkpoint((root / "v3/step-00000002").string(), (root / "v3.safetensors").string(), true);
    wf::train::export_checkpoint((root / "v4/step-00000002").string(), (root / "v4.safetensors").string(), true);
    CHECK(wf::train::CheckpointReader((root / "v3/step-00000002").string()).version() == 3);
    CHECK((file_bytes(root / "v3.safetensors") == file_bytes(root / "v4.safetensors")));
  }
  Run second = make_run({.dp = 2}, root / "v3");
  CHECK(second.trainer->resume());
  CHECK(second.trainer->step() == 2);
  const double loss = second.trainer->train_step().loss;
  CHECK(std::abs(loss - expected[2]) <= 1e-5 * std::abs(expected[2]));
  all_ranks_barrier();
  if (lead) fs::remove_all(root);
}

TEST_CASE("a distributed save that fails on one rank fails on every rank, the previous checkpoint kept",
          "[dist][dist_checkpoint]") {
  const int world = runtime().world_size();
  const fs::path dir = fs::temp_directory_path() / "wf-dist-ckpt-fail";
  const std::shared_ptr<wf::comm::Group> group = world_group("dckpt.fail");
  if (runtime().rank() == 0) fs::remove_all(dir);
  group->barrier();
  const wf::train::CheckpointStore store(dir.string(), 0);
  // Every rank writes its own key; the last rank's piece claims 2 elements of a 1-element tensor.
  const auto pieces = [&](bool broken) {
    const int rank = runtime().rank();
    const bool bad = broken && rank == world - 1;
    return wf::train::ShardedStateDict{{fmt::format("r{}", rank), wf::nn::ParameterShard::replicated({1}), 0,
                                        bad ? 2 : 1, true, wf::Tensor::full({bad ? 2 : 1}, rank)}};
  };
  wf::train::save_sharded_checkpoint(store, 1, pieces(false), {}, "", *group);
  const std::string message =
      error_of([&] { wf::train::save_sharded_checkpoint(store, 2, pieces(true), {}, "", *group); });
  CHECK_THAT(message, Catch::Contains(fmt::format("rank {}: ", world - 1)) &&
                          Catch::Contains(fmt::format("cannot save checkpoint piece 'r{}'", world - 1)));
  group->barrier();
  if (world > 1) {  // ranks that name different directories: the first that differs from rank 0 says so
    const wf::train::CheckpointStore own((dir / fmt::format("r{}", runtime().rank())).string(), 0);
    CHECK_THAT(error_of([&] { wf::train::save_sharded_checkpoint(own, 3, pieces(false), {}, "", *group); }),
               Catch::Contains("rank 1: ") && Catch::Contains("every rank must save into the same checkpoint.dir"));
  }
  group->barrier();
  CHECK(store.list() == std::vector<std::string>{(dir / "step-00000001").string()});
  wf::train::CheckpointReader reader((dir / "step-00000001").string());
  CHECK(reader.world_size() == world);
  CHECK(reader.load_whole(fmt::format("r{}", world - 1)).item() == world - 1);
  group->barrier();
  if (runtime().rank() == 0) fs::remove_all(dir);
}

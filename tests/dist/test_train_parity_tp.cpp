// Training parity with tensor parallelism: every dp × tp × sp layout of this world size trains
// the small GPT (4 layers, 4 heads over 2 kv heads, d_model 64, 64-token sequences, the odd
// vocabulary 1001 that tp pads) and LLaMA to the losses, gradients and weights of one process.
//
// Each case trains 3 optimizer steps (2 under the sanitizers: train_testing.h parity_steps) in f64
// (the reference builds the whole model in this process): the per-step loss and gradient norm
// within 1e-10 relative, each rank's gradient shards at step 1 and its final weight shards within
// 1e-10 of the tensor's largest entry (the f64 bound; the resume tests below and
// train_tp_parity run f32). f64 leaves only summation order between the layouts, so a wrong scale,
// a missing or doubled reduction, a misplaced head or a wrong padding mask shows by many orders of
// magnitude.
//
// The matrix covers each dimension with tp and each pair: tp alone (tied and untied heads,
// dropout, 2 and 4 ranks), tp × dp, tp × sp (WallFacer C 1 and C 2, Ulysses), tp × sp × dp, and
// LLaMA (SwiGLU, RMSNorm, RoPE, GQA) at tp2·sp2 and tp2·sp4; activation sharding inside tp at
// tp2 (with dropout), tp4, and LLaMA tp2·sp2; the parallel-residual family with QK-norm (its
// per-head norm weights' gradients partial over tp) at tp2 and tp2·sp2 Ulysses with activation
// sharding; packed documents (data.pack) at tp2·sp2 Ulysses (LLaMA, activations sharded) and
// tp2·sp4 WallFacer C 2 (GPT). Every case runs with train.check_replicas: a replicated weight that drifts over tp
// fails it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/sharded_state.h"
#include "wallfacer/train/trainer.h"

using wf::DType;
using wf::Tensor;
using namespace wf::test;

namespace {

struct TpLayout {
  int dp = 1, tp = 2, sp = 1, C = 1;
  wf::parallel::SpStrategy strategy = wf::parallel::SpStrategy::wallfacer;
  std::string model = "gpt";
  bool tied = true;
  double dropout = 0.0;
  int n_head = 4, n_kv_head = 2;
  bool shard_activations = false;
  bool packed = false;  // packed documents (pack_documents)
  std::string name() const {
    return fmt::format("{}: dp{} x tp{} x sp{} {} C={}, {} head, {} heads ({} kv){}{}{}", model, dp, tp, sp,
                       wf::parallel::sp_strategy_name(strategy), C, tied ? "tied" : "untied", n_head, n_kv_head,
                       dropout > 0 ? fmt::format(", dropout {}", dropout) : "",
                       shard_activations ? ", activations sharded over tp" : "", packed ? ", packed documents" : "");
  }
};

wf::config::RunConfig tp_config(const TpLayout& layout) {
  wf::config::RunConfig c;
  c.model.set_name(layout.model);
  c.model.set("n_layer", 4);
  c.model.set("n_head", layout.n_head);
  c.model.set("n_kv_head", layout.n_kv_head);
  c.model.set("d_model", 64);
  c.model.set("d_ff", 128);
  c.model.set("vocab_size", 1001);
  c.model.set("max_seq_len", 64);
  c.model.set("tie_embeddings", layout.tied);
  c.model.set("dropout", layout.dropout);
  c.parallel.dp = layout.dp;
  c.parallel.tp = layout.tp;
  c.parallel.sp = layout.sp;
  c.parallel.C = layout.C;
  c.parallel.sp_strategy = layout.strategy;
  c.parallel.tp_shard_activations = layout.shard_activations;
  c.train.seq_len = 64;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 4;  // 4 / dp accumulation steps
  c.train.steps = parity_steps(3);
  c.train.lr = 3e-3;
  c.train.min_lr = 3e-4;
  c.train.warmup_steps = 1;
  c.train.seed = 91;
  c.train.check_replicas = true;  // a replicated weight that drifts over tp fails the case
  c.data.source = wf::config::DataSource::synthetic;
  c.checkpoint.dir = (std::filesystem::temp_directory_path() / "wf-parity-tp").string();
  c.log.dir = c.checkpoint.dir;
  if (layout.packed) pack_documents(c, fmt::format("parity-tp-{}", runtime().rank()), 1001);
  return c;
}

// One step's gradients of both trainers, and their losses. Both draw dropout masks from this
// process's default generator, each seeded as replica 0: the parallel one must start its step
// where the reference started its.
std::pair<double, double> compute_both(wf::train::Trainer& reference, wf::train::Trainer& parallel) {
  const wf::Generator::State before = wf::default_generator().state();
  const double ref_loss = reference.compute_gradients();
  wf::default_generator().set_state(before);
  return {ref_loss, parallel.compute_gradients()};
}

std::vector<TpLayout> tp_layouts_for(int world) {
  using wf::parallel::SpStrategy;
  switch (world) {
    case 2:
      return {{}, {.tied = false}, {.dropout = 0.1}, {.model = "llama"}, {.shard_activations = true},
              {.tied = false, .dropout = 0.1, .shard_activations = true},
              // QK-norm over the heads tp splits: its weight's gradient is partial over tp.
              {.model = "parallel_residual"}};
    case 4:
      return {{.tp = 4, .n_kv_head = 4},  // tp must divide the kv heads
              {.dp = 2, .tp = 2},
              {.tp = 2, .sp = 2, .C = 1, .model = "llama", .shard_activations = true},
              {.tp = 2, .sp = 2, .strategy = SpStrategy::ring, .tied = false},
              {.tp = 4, .n_kv_head = 4, .shard_activations = true},
              {.tp = 2, .sp = 2, .strategy = SpStrategy::ulysses, .model = "parallel_residual",
               .shard_activations = true},
              // Packed documents: their positions per row through activation sharding, bounds to Ulysses.
              {.tp = 2, .sp = 2, .strategy = SpStrategy::ulysses, .model = "llama", .shard_activations = true,
               .packed = true}};
    case 8:
      return {{.dp = 4, .tp = 2},
              {.tp = 2, .sp = 4, .C = 2},
              {.dp = 2, .tp = 2, .sp = 2},
              // Ulysses scatters each tp rank's 4 heads over sp 4 (its 2 kv heads replicated).
              {.tp = 2, .sp = 4, .strategy = SpStrategy::ulysses, .n_head = 8, .n_kv_head = 4},
              {.tp = 2, .sp = 4, .C = 2, .model = "llama"},
              {.tp = 2, .sp = 4, .C = 2, .packed = true}};  // learned positions inside documents, WallFacer C 2
    default: return {};
  }
}

}  // namespace

TEST_CASE("training parity: dp x tp x sp layouts match single-process losses, gradients and weights",
          "[dist][train][tp]") {
  const int world = runtime().world_size();
  for (const TpLayout& layout : tp_layouts_for(world)) {
    INFO(layout.name());
    const wf::config::RunConfig config = tp_config(layout);
    wf::config::RunConfig ref_config = config;
    ref_config.parallel.dp = ref_config.parallel.tp = ref_config.parallel.sp = ref_config.parallel.C = 1;
    wf::config::validate(config, world);
    wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
    wf::comm::CommGrid ref_grid(wf::comm::ProcessGrid(ref_config.parallel.grid(), 1, 0));

    auto reference = trainer_in(ref_config, ref_grid, DType::f64);
    auto parallel = trainer_in(config, grid, DType::f64);
    REQUIRE(parallel->model().num_parameters() < reference->model().num_parameters());  // it is split
    REQUIRE(parallel->model().named_parameters().size() == reference->model().named_parameters().size());
    if (layout.packed) REQUIRE(parallel->batches().get(0, 0).documents().size() == 1);  // they carry documents
    check_parameters_match(reference->model(), parallel->model(), /*grads=*/false, 0.0);  // the same initial weights
    for (int step = 1; step <= config.train.steps; ++step) {
      INFO("step " << step);
      const auto [ref_loss, par_loss] = compute_both(*reference, *parallel);
      CHECK(std::abs(par_loss - ref_loss) <= 1e-10 * std::abs(ref_loss));
      if (step == 1) check_parameters_match(reference->model(), parallel->model(), /*grads=*/true, 1e-10);
      const auto r = reference->apply_gradients(ref_loss);
      const auto p = parallel->apply_gradients(par_loss);
      CHECK(std::abs(p.grad_norm - r.grad_norm) <= 1e-10 * r.grad_norm);
    }
    check_parameters_match(reference->model(), parallel->model(), /*grads=*/false, 1e-10);
  }
}

namespace {

// Trains `saved` 2 steps and checkpoints; `resumed` (another layout of this world, or the same
// one) resumes from it and trains step 3. Every loss must be the reference's: the single-process
// run's to 1e-5, or with `bitwise` the uninterrupted `saved` run's exactly (the same layout, so
// the same sums in the same order, and the dropout streams restored).
void check_resume(const TpLayout& saved, const TpLayout& resumed, bool bitwise) {
  INFO(saved.name() << " -> " << resumed.name());
  const int world = runtime().world_size();
  const auto run_config = [](const TpLayout& layout) {
    wf::config::RunConfig c = tp_config(layout);
    c.checkpoint.dir = (std::filesystem::temp_directory_path() / "wf-tp-reshard").string();
    c.log.dir = c.checkpoint.dir;
    return c;
  };
  const wf::config::RunConfig a = run_config(saved), b = run_config(resumed);
  wf::comm::CommGrid grid_a(wf::comm::ProcessGrid(a.parallel.grid(), world, runtime().rank()));
  wf::comm::CommGrid grid_b(wf::comm::ProcessGrid(b.parallel.grid(), world, runtime().rank()));
  if (runtime().rank() == 0) std::filesystem::remove_all(a.checkpoint.dir);
  grid_a.group("world").barrier();

  std::vector<double> expected;
  if (bitwise) {
    auto uninterrupted = trainer_in(a, grid_a, DType::f32);
    for (int step = 1; step <= 3; ++step) expected.push_back(uninterrupted->train_step().loss);
  } else {
    wf::config::RunConfig single = a;
    single.parallel.dp = single.parallel.tp = single.parallel.sp = single.parallel.C = 1;
    wf::comm::CommGrid ref_grid(wf::comm::ProcessGrid(single.parallel.grid(), 1, 0));
    auto reference = trainer_in(single, ref_grid, DType::f32);
    for (int step = 1; step <= 3; ++step) expected.push_back(reference->train_step().loss);
  }
  const auto matches = [&](double loss, int step) {
    const double want = expected[static_cast<std::size_t>(step - 1)];
    return bitwise ? loss == want : std::abs(loss - want) <= 1e-5 * want;
  };
  {
    auto first = trainer_in(a, grid_a, DType::f32);
    for (int step = 1; step <= 2; ++step) CHECK(matches(first->train_step().loss, step));
    first->save_checkpoint();
  }
  auto second = trainer_in(b, grid_b, DType::f32);
  REQUIRE(second->resume());
  CHECK(second->step() == 2);
  CHECK(matches(second->train_step().loss, 3));
  grid_a.group("world").barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(a.checkpoint.dir);
}

}  // namespace

TEST_CASE("tp checkpoints hold whole tensors: they resume at another layout, or bit for bit at the same one",
          "[dist][train][tp]") {
  switch (runtime().world_size()) {
    case 2:
      check_resume({.tp = 2}, {.dp = 2, .tp = 1}, false);  // tp 2 -> tp 1
      check_resume({.dp = 2, .tp = 1}, {.tp = 2, .tied = true}, false);  // tp 1 -> tp 2
      check_resume({.tp = 2, .tied = false, .dropout = 0.1}, {.tp = 2, .tied = false, .dropout = 0.1}, true);
      break;
    case 4:  // the vocabulary 1001 padded to 1002 at tp 2, to 1004 at tp 4
      check_resume({.dp = 2, .tp = 2, .n_kv_head = 4}, {.tp = 4, .n_kv_head = 4}, false);
      break;
    default: break;
  }
}

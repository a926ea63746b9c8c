// Pipeline parallelism: every layout of this world with pp > 1 trains the small GPT (4 blocks)
// to the losses, gradient norms, gradients and weights of one process.
//
// Each case trains 3 optimizer steps (2 under the sanitizers: train_testing.h parity_steps) in f64
// (the reference builds the whole model in this process; at 8 ranks again in f32, losses and
// gradient norms within 1e-5): per-step loss and gradient norm within 1e-10 relative; at step 1
// every parameter's gradient on this rank's stage, and at the end its weights, within 1e-10 of the
// tensor's largest entry. f64 leaves only summation order between the layouts, so a lost
// microbatch, a gradient sent to the wrong stage, a tied embedding summed twice (or not at all) or
// a loss normalised per stage shows by many orders of magnitude.
//
// The matrix covers pp with each other dimension and each schedule: pp alone (GPipe, 1F1B,
// interleaved, one microbatch, more stages than microbatches, uneven pp_layers), pp × dp, pp × sp
// (WallFacer C 1 and C 2), pp × tp, pp × tp × sp, dp × pp × sp, pp × tp × dp with ZeRO-1,
// interleaved × sp, interleaved × dp with ZeRO-2, activations sharded over tp inside the stages, LLaMA (untied, RoPE, SwiGLU) over
// pp × sp, packed documents over pp × sp (LLaMA checkpointed, GPT under WallFacer C 2), the
// parallel-residual family with QK-norm over pp (checkpointed) and pp × tp; tied and
// untied heads; activation checkpointing on and off. Every case runs with train.check_replicas.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/autograd/node.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/pipeline_runner.h"
#include "wallfacer/train/sharded_state.h"
#include "wallfacer/train/trainer.h"

using wf::DType;
using wf::Tensor;
using wf::parallel::PipelineScheduleKind;
using namespace wf::test;

namespace {

struct PpLayout {
  int pp = 2, dp = 1, tp = 1, sp = 1, C = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int virtual_stages = 1;
  int microbatches = 4;
  bool tied = true;
  bool checkpointed = false;
  int zero = 0;
  std::vector<std::int64_t> layers = {};
  std::string model = "gpt";
  bool shard_activations = false;
  bool packed = false;  // packed documents (pack_documents)
  std::string name() const {
    return fmt::format("{}: pp{} ({} v{}, {} microbatches{}) x dp{} x tp{} x sp{} C={}, {} head{}{}{}{}", model, pp,
                       wf::parallel::to_string(schedule), virtual_stages, microbatches,
                       layers.empty() ? "" : fmt::format(", layers [{}]", fmt::join(layers, ", ")), dp, tp, sp, C,
                       tied ? "tied" : "untied", checkpointed ? ", checkpointed" : "",
                       zero > 0 ? fmt::format(", ZeRO-{}", zero) : "",
                       shard_activations ? ", activations sharded over tp" : "", packed ? ", packed documents" : "");
  }
};

wf::config::RunConfig pp_config(const PpLayout& layout) {
  wf::config::RunConfig c = small_gpt_run(layout.dp, layout.sp, layout.checkpointed, "wf-parity-pp", layout.model);
  c.model.set("n_layer", 4);
  c.model.set("tie_embeddings", layout.tied);
  c.parallel.pp = layout.pp;
  c.parallel.tp = layout.tp;
  c.parallel.C = layout.C;
  c.parallel.pp_schedule = layout.schedule;
  c.parallel.pp_virtual = layout.virtual_stages;
  c.parallel.pp_layers = layout.layers;
  c.parallel.zero = layout.zero;
  c.parallel.tp_shard_activations = layout.shard_activations;
  c.parallel.grad_bucket_mb = 16.0 / 1024;  // many buckets, so the tied embedding's isolation matters
  c.train.global_batch_size = layout.dp * layout.microbatches;
  c.train.steps = parity_steps(3);
  c.train.warmup_steps = 1;
  c.train.min_lr = 3e-4;
  c.train.seed = 23;
  c.train.check_replicas = true;
  if (layout.packed) pack_documents(c, fmt::format("parity-pp-{}", runtime().rank()), 256);
  return c;
}

std::vector<PpLayout> pp_layouts_for(int world) {
  using K = PipelineScheduleKind;
  switch (world) {
    case 2:
      return {{.schedule = K::gpipe},
              {.schedule = K::one_f_one_b, .tied = false},
              {.schedule = K::one_f_one_b, .microbatches = 1, .checkpointed = true},
              {.schedule = K::interleaved, .virtual_stages = 2},
              {.layers = {1, 3}},
              {.checkpointed = true, .model = "parallel_residual"}};
    case 3: return {{.pp = 3, .microbatches = 2, .layers = {2, 1, 1}}};
    case 4:
      return {{.pp = 4, .microbatches = 2},  // more stages than microbatches
              {.dp = 2, .schedule = K::gpipe, .microbatches = 2},
              {.sp = 2, .schedule = K::interleaved, .virtual_stages = 2, .checkpointed = true},
              {.tp = 2, .tied = false},
              {.tp = 2, .shard_activations = true},
              {.sp = 2, .tied = false, .model = "llama"},
              // Packed documents: every stage reads the batch's positions and bounds, the replay too.
              {.sp = 2, .checkpointed = true, .model = "llama", .packed = true},
              {.tp = 2, .tied = false, .model = "parallel_residual"},
              // ZeRO-2 over interleaved chunks: every backward reduce-scatters every bucket, most of
              // them (the other chunk's) launched before any gradient reached them.
              {.dp = 2, .schedule = K::interleaved, .virtual_stages = 2, .microbatches = 2, .zero = 2}};
    case 8:
      return {{.dp = 4, .schedule = K::gpipe, .microbatches = 2},
              {.dp = 4, .microbatches = 2},
              {.pp = 4, .sp = 2, .checkpointed = true},
              {.tp = 2, .sp = 2},
              {.sp = 4, .C = 2, .tied = false},
              {.dp = 2, .sp = 2, .checkpointed = true},
              {.dp = 2, .tp = 2, .zero = 1},
              {.sp = 4, .schedule = K::interleaved, .virtual_stages = 2},
              {.sp = 4, .C = 2, .packed = true}};
    default: return {};
  }
}

// Trains `layout` and one process side by side in `dtype` for the config's steps: per-step loss
// and gradient norm within `tolerance` relative; with `weights`, every gradient of this rank's
// stage at step 1 and the final weights within it of each tensor's largest entry.
void check_pipeline_parity(const PpLayout& layout, DType dtype, double tolerance, bool weights) {
  const int world = runtime().world_size();
  INFO(layout.name() << " in " << wf::dtype_name(dtype));
  const wf::config::RunConfig config = pp_config(layout);
  wf::config::RunConfig ref_config = config;
  ref_config.parallel = wf::config::ParallelSection{};
  wf::config::validate(config, world);
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
  wf::comm::CommGrid ref_grid(wf::comm::ProcessGrid(ref_config.parallel.grid(), 1, 0));

  auto reference = trainer_in(ref_config, ref_grid, dtype);
  auto parallel = trainer_in(config, grid, dtype);
  REQUIRE(parallel->pipeline() != nullptr);
  if (layout.packed) REQUIRE(parallel->batches().get(0, 0).documents().size() == 1);  // they carry documents
  REQUIRE(parallel->model().stage() == wf::models::pipeline_stage(config, grid.grid()));
  if (layout.checkpointed) {
    // The stage runs its blocks with the attention-output checkpoint, not silently without it.
    auto& decoder = dynamic_cast<wf::models::DecoderLM&>(parallel->model());
    REQUIRE(decoder.num_blocks() > 0);
    for (std::size_t b = 0; b < decoder.num_blocks() && layout.model != "parallel_residual"; ++b) {
      CHECK(decoder.transformer_block(b).options().checkpoint_attention);  // a family's own: the graph below
    }
    if (!decoder.stage().head) {
      // A stage's output comes out of the checkpoint node: its input (a received leaf, or the
      // embedding) requires grad, which the checkpoint needs to engage.
      const auto loader_batch = wf::models::token_batch(Tensor::zeros({1, 48 / layout.sp}, DType::i64),
                                                       Tensor::zeros({1, 48 / layout.sp}, DType::i64),
                                                       Tensor::arange(0.0, 48.0 / layout.sp, 1.0, DType::i64));
      const auto [shape, dtype] = decoder.stage_hidden(loader_batch);
      Tensor input = Tensor::zeros(shape, dtype);
      input.set_requires_grad(true);
      const Tensor out = decoder.forward_stage(loader_batch, input, 0).hidden;
      REQUIRE(out.grad_fn() != nullptr);
      CHECK(out.grad_fn()->name() == "AttentionOutputCheckpoint");
    }
  }
  check_parameters_match(reference->model(), parallel->model(), /*grads=*/false, 0.0);  // the same initial weights
  for (int step = 1; step <= config.train.steps; ++step) {
    INFO("step " << step);
    const double ref_loss = reference->compute_gradients();
    const double par_loss = parallel->compute_gradients();
    CHECK(std::abs(par_loss - ref_loss) <= tolerance * std::abs(ref_loss));
    if (weights && step == 1 && layout.zero == 0) {
      check_parameters_match(reference->model(), parallel->model(), /*grads=*/true, tolerance);
    }
    const auto r = reference->apply_gradients(ref_loss);
    const auto p = parallel->apply_gradients(par_loss);
    CHECK(std::abs(p.grad_norm - r.grad_norm) <= tolerance * r.grad_norm);
  }
  if (weights) check_parameters_match(reference->model(), parallel->model(), /*grads=*/false, tolerance);
  // The schedule ran every action of this rank, and the measured bubble is a fraction.
  const auto& timeline = parallel->pipeline()->timeline();
  CHECK(timeline.size() == parallel->pipeline()->schedule().actions(grid.grid().coord("pp")).size());
  CHECK(parallel->pipeline()->bubble() >= 0.0);
}

}  // namespace

TEST_CASE("pipeline parity: pp layouts match single-process losses, gradients and weights", "[dist][train][pp]") {
  for (const PpLayout& layout : pp_layouts_for(runtime().world_size())) check_pipeline_parity(layout, DType::f64, 1e-10, /*weights=*/true);
}

// The same layouts in f32, the dtype users train in: losses and gradient norms within 1e-5
// relative at every step. Weights and gradients are compared in f64 above only: in f32 Adam
// turns the rounding noise of gradients that are zero up to rounding (the key biases, whose
// gradient softmax cancels) into updates of ±lr·noise/(noise + eps), which differ between any
// two summation orders (test_zero.cpp says more). At 8 ranks, where the matrix holds every
// pairing of pp.
TEST_CASE("pipeline parity in f32: losses and gradient norms within 1e-5 of one process", "[dist][train][pp]") {
  if (runtime().world_size() != 8) return;
  for (const PpLayout& layout : pp_layouts_for(8)) check_pipeline_parity(layout, DType::f32, 1e-5, /*weights=*/false);
}

TEST_CASE("pipeline: validation loss over the stages equals one process's", "[dist][train][pp]") {
  const int world = runtime().world_size();
  if (world % 2 != 0) return;
  PpLayout layout{.pp = 2, .dp = world / 2, .microbatches = 2};
  wf::config::RunConfig config = pp_config(layout);
  config.train.eval_batches = 2;
  config.train.eval_every = 1;
  wf::config::RunConfig ref_config = config;
  ref_config.parallel = wf::config::ParallelSection{};
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
  wf::comm::CommGrid ref_grid(wf::comm::ProcessGrid(ref_config.parallel.grid(), 1, 0));
  const auto make = [](const wf::config::RunConfig& c, wf::comm::CommGrid& g) {
    auto model = wf::models::create(c, g);
    model->to(DType::f64);
    return std::make_unique<wf::train::Trainer>(c, g, std::move(model), wf::train::open_token_source(c, false),
                                                wf::train::open_token_source(c, true));
  };
  auto reference = make(ref_config, ref_grid);
  auto parallel = make(config, grid);
  const double expected = reference->evaluate();
  CHECK(std::abs(parallel->evaluate() - expected) <= 1e-10 * expected);
}

// train.check_replicas (parallel/replica_check.h): a norm over the heads tensor parallelism
// splits (QK-norm) declared like a plain norm gets no sum of its partial gradients over tp, so its
// copies drift apart; the check fails the step, naming the parameter and the fix. Declared with
// its role (ActivationRegion::split) the same model trains with the check quiet.
#include <catch2/catch.hpp>

#include <memory>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/train/trainer.h"

using Catch::Contains;
using namespace wf::test;

namespace {

// The smallest block with a per-head norm: x + attn(x) with q normalised per head by a norm
// declared in `region`.
class QNormBlock final : public wf::nn::SequenceBlock {
 public:
  QNormBlock(const wf::nn::TransformerBlockOptions& o, wf::nn::ActivationRegion region) : SequenceBlock(o.seed) {
    attn_ = register_module("attn", std::make_shared<wf::nn::SelfAttention>(wf::nn::block_attention_options(o, 1)));
    q_norm_ = register_module("q_norm", wf::nn::layers_or_default(o.layers)
                                            .norm(o.norm, o.d_model / o.n_head, o.norm_eps, region));
  }
  wf::Tensor forward(const wf::Tensor& x, const wf::nn::TokenPositions& where) override {
    wf::nn::AttentionHeads heads = attn_->project(x, where.positions);
    heads.q = q_norm_->forward(heads.q);
    const wf::Tensor out = attn_->strategy()->forward(heads.q, heads.k, heads.v, attn_->attention_options(where)).out;
    return wf::add(x, attn_->output(out));
  }

 private:
  std::shared_ptr<wf::nn::SelfAttention> attn_;
  std::shared_ptr<wf::nn::Normalization> q_norm_;
};

// Three steps of the small GPT with QNormBlocks over tp 2 (and dp for the rest of the world).
void train_with_q_norm(wf::nn::ActivationRegion region) {
  const int world = runtime().world_size();
  wf::config::RunConfig config = small_gpt_run(world / 2, 1, false, "wf-replica-check");
  config.parallel.tp = 2;
  config.train.global_batch_size = world / 2;
  config.train.steps = 3;
  config.train.check_replicas = true;
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
  wf::models::DecoderOptions options = wf::models::gpt_options(config);
  wf::models::place_on_grid(options, config, grid);
  options.block.build = [region](const wf::nn::TransformerBlockOptions& b) {
    return std::make_shared<QNormBlock>(b, region);
  };
  auto model = std::make_shared<wf::models::DecoderLM>("gpt", options);
  wf::train::Trainer trainer(config, grid, model, wf::train::open_token_source(config, false), nullptr);
  for (int step = 0; step < config.train.steps; ++step) trainer.train_step();
}

}  // namespace

TEST_CASE("check_replicas: a per-head norm declared like a plain norm fails the step under tp; with its role it "
          "trains", "[dist][train][tp]") {
  if (runtime().world_size() % 2 != 0) return;
  CHECK_THROWS_WITH(train_with_q_norm(wf::nn::ActivationRegion::replicated),
                    Contains("check_replicas") && Contains("blocks.0.q_norm.weight") &&
                        Contains("ActivationRegion::split"));
  CHECK_NOTHROW(train_with_q_norm(wf::nn::ActivationRegion::split));
}

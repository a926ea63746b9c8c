// The pre-norm block's attention residual add fused into norm2 (Normalization::forward_add) and its
// feed-forward's residual add fused into the output projection (FeedForward::forward_add, one
// linear_add node): the fused block gives the bits of the unfused one. checkpoint_mlp keeps the
// unfused adds (its checkpoint replays norm2 and the feed-forward), so the same block with and
// without it compares the two paths.
#include <catch2/catch.hpp>

#include <utility>

#include "nn/module_testing.h"
#include "wallfacer/nn/nn.h"
#include "wallfacer/ops/ops.h"

using wf::Tensor;
using namespace wf::nn;
using wf::nn::testing::max_abs_diff;

TEST_CASE("TransformerBlock: the fused residual adds (norm2, the feed-forward's projection) give the unfused "
          "block's bits",
          "[nn]") {
  for (const auto& [norm, feed_forward] : {std::pair{NormType::layer_norm, FeedForwardKind::mlp},
                                           std::pair{NormType::rms_norm, FeedForwardKind::swiglu}}) {
    CAPTURE(norm_type_name(norm), feed_forward_name(feed_forward));
    const TransformerBlockOptions options{.d_model = 16, .n_head = 2, .norm = norm, .seed = 5,
                                          .feed_forward = feed_forward};
    TransformerBlock fused(options), unfused(options);
    unfused.set_checkpointing(false, true);
    const Tensor input = Tensor::randn_at({2, 5, 16}, 3, 0), w = Tensor::randn_at({2, 5, 16}, 4, 0);
    auto run = [&](TransformerBlock& block) {
      Tensor x = input.clone();
      x.set_requires_grad(true);
      const Tensor out = block.forward(x);
      CHECK(out.grad_fn()->name() == (&block == &fused ? "linear_add" : "add"));
      wf::sum(wf::mul(out, w)).backward();
      return std::make_pair(out.detach(), x.grad());
    };
    const auto [out_fused, dx_fused] = run(fused);
    const auto [out_unfused, dx_unfused] = run(unfused);
    CHECK(max_abs_diff(out_fused, out_unfused) == 0.0);
    CHECK(max_abs_diff(dx_fused, dx_unfused) == 0.0);
    const auto a = fused.named_parameters(), b = unfused.named_parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(max_abs_diff(a[i].second.grad(), b[i].second.grad()) == 0.0);
    }
  }
}

TEST_CASE("Normalization::forward_add is the add then forward, for a norm without a fused form too", "[nn]") {
  LayerNorm layer(8, 1e-5, /*affine=*/false);
  RMSNorm rms(8);
  const Tensor x = Tensor::randn_at({3, 8}, 5, 0), branch = Tensor::randn_at({3, 8}, 6, 0);
  const Tensor sum = wf::add(x, branch);
  for (Normalization* norm : {static_cast<Normalization*>(&layer), static_cast<Normalization*>(&rms)}) {
    const wf::AddNorm out = norm->forward_add(x, branch);
    CHECK(max_abs_diff(out.sum, sum) == 0.0);
    CHECK(max_abs_diff(out.y, norm->forward(sum)) == 0.0);
  }
  // The base class's composition (a norm a user brings through make_norm).
  CHECK(max_abs_diff(layer.Normalization::forward_add(x, branch).y, layer.forward(sum)) == 0.0);
  REQUIRE_THROWS_WITH(rms.forward_add(Tensor::zeros({3, 4}), Tensor::zeros({3, 4})), Catch::Contains("RMSNorm"));
}

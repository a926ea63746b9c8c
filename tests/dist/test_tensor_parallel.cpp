// Tensor parallelism (wallfacer/parallel/tensor_parallel.h) with the whole world as the tp
// group: the last-dim mappings forward and backward in f64 against the whole tensors every rank
// can draw; column- and row-parallel linears initialised as slices of the whole layer; and MLP /
// SwiGLU built with TensorParallelLayers computing the single-process block's output, input
// gradient and (each rank its slice of) weight gradients.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "dist_testing.h"
#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/nn/init.h"
#include "wallfacer/nn/mlp.h"
#include "wallfacer/nn/self_attention.h"
#include "wallfacer/nn/transformer_block.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/parallel/tensor_parallel.h"
#include "wallfacer/train/optimizer.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Primitive;
using namespace wf::test;

namespace {

constexpr DType kF64 = DType::f64;
constexpr std::uint64_t kInputSeed = 81, kWeightSeed = 82;
constexpr std::int64_t kF64Bytes = 8;

// Rank r's slice of the last dim of t split into `parts` equal slices.
Tensor last_dim_slice(const Tensor& t, int r, int parts) {
  const std::int64_t k = t.size(-1) / parts;
  return wf::narrow(t, -1, r * k, k);
}

// This rank's slice of a whole tensor, as `shard` describes it (the whole tensor if replicated).
Tensor slice_of(const Tensor& whole, const wf::nn::ParameterShard& shard) {
  return shard.is_sharded() ? wf::narrow(whole, shard.dim, shard.start(), shard.length()) : whole;
}

void backward_weighted_sum(const Tensor& y, const Tensor& w) { wf::sum(wf::mul(y, w)).backward(); }

}  // namespace

TEST_CASE("tp scatter_to_tp: keeps this rank's last-dim slice; backward all-gathers", "[dist][tp]") {
  auto group = world_group("t.tp.scatter");
  const int P = group->size(), me = group->rank();
  const Shape whole_shape{2, 3, 4 * P};
  const Tensor whole = Tensor::randn_at(whole_shape, kInputSeed, 0, kF64);  // replicated: every rank draws it
  const Tensor global_w = Tensor::randn_at(whole_shape, kWeightSeed, 0, kF64);

  Tensor x = whole.clone();
  x.set_requires_grad();
  const Tensor y = wf::parallel::scatter_to_tp(*group, x);
  CHECK(mismatch(y, last_dim_slice(whole, me, P)) == "");

  // Rank r's term weighs its slice by its slice of W, so together L = Σ W ∘ x: dL/dx = W.
  backward_weighted_sum(y, last_dim_slice(global_w, me, P));
  CHECK(mismatch(x.grad(), global_w) == "");

  const std::int64_t volume = (P - 1) * whole.numel() * kF64Bytes / P;  // of the gathered size
  expect_traffic(*group, Primitive::all_gather, volume, volume);
}

TEST_CASE("tp gather_from_tp: all-gathers the last dim; backward keeps this rank's slice", "[dist][tp]") {
  auto group = world_group("t.tp.gather");
  const int P = group->size(), me = group->rank();
  const Shape whole_shape{3, 2, 2 * P};
  const Tensor whole = Tensor::randn_at(whole_shape, kInputSeed, 0, kF64);
  const Tensor w = Tensor::randn_at(whole_shape, kWeightSeed, 0, kF64);

  Tensor x = last_dim_slice(whole, me, P);
  x.set_requires_grad();
  const Tensor y = wf::parallel::gather_from_tp(*group, x);
  CHECK(mismatch(y, whole) == "");

  // y is replicated and counted once: the same w everywhere, and x_me's gradient is its slice.
  backward_weighted_sum(y, w);
  CHECK(mismatch(x.grad(), last_dim_slice(w, me, P)) == "");

  const std::int64_t volume = (P - 1) * whole.numel() * kF64Bytes / P;
  expect_traffic(*group, Primitive::all_gather, volume, volume);
}

TEST_CASE("tp copy_to_tp and reduce_from_tp are the replicated region's two ends", "[dist][tp]") {
  auto group = world_group("t.tp.region");
  const int P = group->size();
  const Shape shape{2, 5};
  Tensor x = Tensor::randn_at(shape, kInputSeed, 0, kF64);
  x.set_requires_grad();
  // copy → (each rank: its own scale) → reduce: y = Σ_r (r+1)·x, and dy/dx sums the same.
  const Tensor y = wf::parallel::reduce_from_tp(
      *group, wf::scale(wf::parallel::copy_to_tp(*group, x), static_cast<double>(group->rank() + 1)));
  const double total = P * (P + 1) / 2.0;
  CHECK(mismatch(y, wf::scale(x.detach(), total), reduction_tolerance(kF64)) == "");
  const Tensor w = Tensor::randn_at(shape, kWeightSeed, 0, kF64);
  backward_weighted_sum(y, w);
  CHECK(mismatch(x.grad(), wf::scale(w, total), reduction_tolerance(kF64)) == "");
}

TEST_CASE("tp ColumnParallelLinear / RowParallelLinear hold slices of the whole layer's init", "[dist][tp]") {
  auto group = world_group("t.tp.init");
  const int P = group->size(), me = group->rank();
  const wf::nn::LinearOptions options{.in_features = 24, .out_features = 48, .bias = true, .init_std = 0.3, .seed = 5};
  const wf::nn::Linear whole(options);

  const wf::parallel::ColumnParallelLinear column(options, *group);
  const auto& column_shard = column.parameter_shard("weight");
  CHECK(column_shard.dim == 0);
  CHECK(column_shard.parts == P);
  CHECK(column_shard.index == me);
  CHECK(column_shard.group == "t.tp.init");
  CHECK(column_shard.global_shape == Shape{48, 24});
  CHECK(column.weight().shape() == Shape{48 / P, 24});
  CHECK(column.bias().shape() == Shape{48 / P});
  CHECK(column.weight().to_vector<float>() == whole.weight().slice0(me * 48 / P, (me + 1) * 48 / P).to_vector<float>());

  const wf::parallel::RowParallelLinear row(options, *group);
  const auto& row_shard = row.parameter_shard("weight");
  CHECK(row_shard.dim == 1);
  CHECK(row_shard.index == me);
  CHECK(row.weight().shape() == Shape{48, 24 / P});
  CHECK_FALSE(row.parameter_shard("bias").is_sharded());  // added once, after the reduction
  CHECK(row.weight().to_vector<float>() == last_dim_slice(whole.weight().detach(), me, P).to_vector<float>());

  if (P > 1) {  // the same on every rank: each throws before any collective
    const wf::nn::LinearOptions odd{.in_features = 24, .out_features = 8 * P + 1, .seed = 5};
    CHECK_THROWS_WITH(wf::parallel::ColumnParallelLinear(odd, *group),
                      Catch::Contains(fmt::format("out_features = {} does not split", 8 * P + 1)));
  }
}

TEST_CASE("tp ColumnParallelLinear(gather_output) and RowParallelLinear(whole input) equal the whole layer",
          "[dist][tp]") {
  auto group = world_group("t.tp.ends");
  const wf::nn::LinearOptions options{.in_features = 24, .out_features = 24, .bias = true, .init_std = 0.3, .seed = 6};
  wf::nn::Linear whole(options);
  whole.to(kF64);
  const Tensor x = Tensor::randn_at({3, 24}, kInputSeed, 0, kF64);
  const Tensor expected = whole.forward(x);

  wf::parallel::ColumnParallelLinear column(options, *group, /*gather_output=*/true);
  column.to(kF64);
  CHECK(mismatch(column.forward(x), expected, 1e-12) == "");
  wf::parallel::RowParallelLinear row(options, *group, /*input_is_parallel=*/false);
  row.to(kF64);
  CHECK(mismatch(row.forward(x), expected, 1e-12) == "");
}

namespace {

using Forward = std::function<Tensor(wf::nn::Module&, const Tensor&)>;

// This rank's slice of the tokens (dim -2) of t, or t when the tokens are not sharded.
Tensor token_slice(const Tensor& t, wf::comm::Group& tp, bool sharded) {
  if (!sharded) return t;
  const std::int64_t n = t.size(-2) / tp.size();
  return wf::narrow(t, -2, tp.rank() * n, n);
}

// `parallel` (built with TensorParallelLayers over `tp`) against `reference` (the same options,
// plain layers) on one input: the output, the input gradient and every parameter's gradient,
// which must be this rank's slice of the reference's as the parameter's shard says. With
// `sharded_tokens` (activation sharding) the parallel module takes and gives this rank's slice
// of the tokens, the job's loss is the sum of the ranks' terms on their slices, and the
// partial gradients are summed over tp (reduce_partial_gradients) before they are compared.
void check_matches_single_process(wf::nn::Module& reference, wf::nn::Module& parallel, const Forward& forward,
                                  const Shape& input_shape, DType dtype, double tolerance, wf::comm::Group& tp,
                                  bool sharded_tokens = false) {
  reference.to(dtype);
  parallel.to(dtype);
  const Tensor x0 = Tensor::randn_at(input_shape, kInputSeed, 0, dtype);
  Tensor x_ref = x0.clone(), x_tp = token_slice(x0, tp, sharded_tokens).clone();
  x_ref.set_requires_grad();
  x_tp.set_requires_grad();
  const Tensor y_ref = forward(reference, x_ref);
  const Tensor y_tp = forward(parallel, x_tp);
  CHECK(mismatch(y_tp, token_slice(y_ref, tp, sharded_tokens), tolerance) == "");

  // A replicated output: the same loss on every rank, counted once. A sharded one: each rank's
  // term weighs its tokens, so together they are the single process's Σ W ∘ y.
  const Tensor w = Tensor::randn_at(y_ref.shape(), kWeightSeed, 0, dtype);
  backward_weighted_sum(y_ref, w);
  backward_weighted_sum(y_tp, token_slice(w, tp, sharded_tokens));
  CHECK(mismatch(x_tp.grad(), token_slice(x_ref.grad(), tp, sharded_tokens), tolerance) == "");
  const int reduced = wf::parallel::reduce_partial_gradients(parallel, tp);
  if (!sharded_tokens) CHECK(reduced == 0);

  // Every parameter's gradient is this rank's slice of the whole block's, and the shard says
  // which slice (column layers: rows of weight and bias; row layers: weight columns).
  const auto ref_params = reference.named_parameters();
  const auto tp_params = parallel.named_parameters();
  const auto shards = parallel.named_parameter_shards();
  CHECK(tp_params.size() == ref_params.size());
  for (std::size_t i = 0; i < std::min(tp_params.size(), ref_params.size()); ++i) {
    INFO(tp_params[i].first << ": " << wf::nn::shard_str(shards[i].second));
    CHECK(tp_params[i].first == ref_params[i].first);
    CHECK(shards[i].second.global_shape == ref_params[i].second.shape());
    CHECK(mismatch(tp_params[i].second.detach(), slice_of(ref_params[i].second.detach(), shards[i].second), 0) == "");
    CHECK(mismatch(tp_params[i].second.grad(), slice_of(ref_params[i].second.grad(), shards[i].second), tolerance) ==
          "");
  }
}

// f32 to the brief's 1e-5, f64 to rounding (the row layer sums its partial products in
// another order than one matmul does).
const std::pair<DType, double> kPrecisions[] = {{DType::f32, 1e-5}, {kF64, 1e-12}};

}  // namespace

TEST_CASE("tp MLP and SwiGLU built with TensorParallelLayers match the single-process block", "[dist][tp]") {
  auto group = world_group("t.tp.mlp");
  const auto layers = std::make_shared<wf::parallel::TensorParallelLayers>(*group);
  using Make = std::function<std::shared_ptr<wf::nn::FeedForward>(const wf::nn::MLPOptions&)>;
  const std::pair<const char*, Make> blocks[] = {
      {"MLP", [](const wf::nn::MLPOptions& o) { return std::make_shared<wf::nn::MLP>(o); }},
      {"SwiGLU", [](const wf::nn::MLPOptions& o) { return std::make_shared<wf::nn::SwiGLU>(o); }},
  };
  const Forward forward = [](wf::nn::Module& m, const Tensor& x) {
    return dynamic_cast<wf::nn::FeedForward&>(m).forward(x);
  };
  for (const auto& [block_name, make] : blocks) {
    for (const auto& [dtype, tolerance] : kPrecisions) {
      INFO(fmt::format("{} in {} on {} ranks", block_name, wf::dtype_name(dtype), group->size()));
      // d_ff = 24 divides over 1, 2, 3, 4 and 8 ranks.
      wf::nn::MLPOptions options{.d_model = 8, .d_ff = 24, .init_std = 0.2, .out_init_std = 0.1, .seed = 17};
      const auto reference = make(options);
      options.layers = layers;
      const auto parallel = make(options);
      check_matches_single_process(*reference, *parallel, forward, {2, 3, 8}, dtype, tolerance, *group);
    }
  }
}

// The column-parallel fc of a GELU MLP runs its GELU inside its own product (one linear_gelu node
// per rank, which a backend may fuse into the GEMM's epilogue), with the bits of gelu(forward(x)).
TEST_CASE("tp ColumnParallelLinear::forward_gelu is one linear_gelu node with gelu(forward)'s bits", "[dist][tp]") {
  auto group = world_group("t.tp.gelu");
  for (const bool gather : {false, true}) {
    INFO(fmt::format("gather_output {} on {} ranks", gather, group->size()));
    wf::parallel::ColumnParallelLinear fc({.in_features = 8, .out_features = 24, .init_std = 0.3, .seed = 5}, *group,
                                          gather);
    const Tensor x = Tensor::randn_at({2, 3, 8}, 6, 0);
    const auto weight_grad = [&](const Tensor& y) {
      fc.zero_grad();
      wf::sum(y).backward();
      return fc.weight().grad().clone();
    };
    const Tensor fused = fc.forward_gelu(x);
    const wf::autograd::Node* node = fused.grad_fn().get();
    if (gather) node = node->next_edges()[0].node.get();  // under the gather
    CHECK(node->name() == "linear_gelu");
    const Tensor fused_grad = weight_grad(fused);
    const Tensor composed = wf::gelu(fc.forward(x));
    CHECK(fused.to_vector<float>() == composed.to_vector<float>());
    CHECK(fused_grad.to_vector<float>() == weight_grad(composed).to_vector<float>());
  }
}

TEST_CASE("tp SelfAttention and TransformerBlock split heads over tp and match the single-process layer",
          "[dist][tp]") {
  auto group = world_group("t.tp.attention");
  const int P = group->size();
  const auto layers = std::make_shared<wf::parallel::TensorParallelLayers>(*group);
  // GQA with whole kv groups per rank: 2P query heads over P kv heads of head_dim 4; causal
  // with rope, and bidirectional without. The init shrinks as 1/√d_model so that the f32
  // scores stay O(1) at every width (larger ones would test f32 softmax rounding, not tp).
  for (const bool rope : {true, false}) {
    for (const auto& [dtype, tolerance] : kPrecisions) {
      INFO(fmt::format("rope {} in {} on {} ranks", rope, wf::dtype_name(dtype), P));
      wf::nn::SelfAttentionOptions o{.d_model = 8 * P, .n_head = 2 * P, .n_kv_head = P, .causal = rope,
                                     .init_std = 0.8 / std::sqrt(8.0 * P), .rope = rope, .seed = 3};
      wf::nn::SelfAttention reference(o);
      o.layers = layers;
      wf::nn::SelfAttention parallel(o);
      CHECK(parallel.local_heads() == 2);
      CHECK(parallel.local_kv_heads() == 1);
      const Forward forward = [](wf::nn::Module& m, const Tensor& x) {
        return dynamic_cast<wf::nn::SelfAttention&>(m).forward(x, /*position_offset=*/2);
      };
      check_matches_single_process(reference, parallel, forward, {2, 5, 8 * P}, dtype, tolerance, *group);
    }
  }
  // A whole pre-norm block, SwiGLU and RMSNorm, with the checkpoint at the attention output.
  for (const bool checkpoint : {false, true}) {
    INFO(fmt::format("TransformerBlock, checkpoint {} on {} ranks", checkpoint, P));
    wf::nn::TransformerBlockOptions o{.d_model = 8 * P, .n_head = 2 * P, .n_kv_head = P, .d_ff = 8 * P,
                                      .norm = wf::nn::NormType::rms_norm, .init_std = 0.3, .rope = true,
                                      .checkpoint_attention = checkpoint, .seed = 4,
                                      .feed_forward = wf::nn::FeedForwardKind::swiglu};
    wf::nn::TransformerBlock reference(o);
    o.layers = layers;
    wf::nn::TransformerBlock parallel(o);
    const Forward forward = [](wf::nn::Module& m, const Tensor& x) {
      const Tensor positions = Tensor::arange(0.0, static_cast<double>(x.size(1)), 1.0, DType::i64);
      return dynamic_cast<wf::nn::TransformerBlock&>(m).forward(x, positions);
    };
    check_matches_single_process(reference, parallel, forward, {2, 6, 8 * P}, kF64, 1e-12, *group);
  }
  if (P > 1) {  // the same on every rank: each throws before any collective
    wf::nn::SelfAttentionOptions odd{.d_model = 8 * P, .n_head = 2 * P, .n_kv_head = 1, .seed = 3};
    odd.layers = layers;
    CHECK_THROWS_WITH(wf::nn::SelfAttention(odd), Catch::Contains("n_kv_head = 1 is not a multiple"));
  }
}

TEST_CASE("tp clip_grad_norm: split parameters counted once per shard, replicated ones once", "[dist][tp]") {
  auto group = world_group("t.tp.clip");
  const auto layers = std::make_shared<wf::parallel::TensorParallelLayers>(*group);
  // SwiGLU: gate and up split by rows (with biases), down split by columns, down's bias replicated.
  wf::nn::MLPOptions options{.d_model = 8, .d_ff = 24, .init_std = 0.2, .out_init_std = 0.1, .seed = 19};
  wf::nn::SwiGLU reference(options);
  options.layers = layers;
  wf::nn::SwiGLU parallel(options);
  reference.to(kF64);
  parallel.to(kF64);
  const Tensor x = Tensor::randn_at({2, 3, 8}, kInputSeed, 0, kF64);
  const Tensor w = Tensor::randn_at({2, 3, 8}, kWeightSeed, 0, kF64);
  backward_weighted_sum(reference.forward(x), w);
  backward_weighted_sum(parallel.forward(x), w);

  std::vector<wf::nn::ParameterShard> shards;
  for (const auto& [name, shard] : parallel.named_parameter_shards()) shards.push_back(shard);
  const double inf = std::numeric_limits<double>::infinity();
  const double whole = wf::train::clip_grad_norm(reference.parameters(), inf);
  const double split = wf::train::clip_grad_norm(parallel.parameters(), shards, *group, inf);
  INFO("single-process norm " << whole << ", tensor-parallel " << split << " on " << group->size() << " ranks");
  CHECK(std::abs(split - whole) <= 1e-12 * whole);

  // Clipping to half the norm scales every shard like the whole model's gradient.
  CHECK(wf::train::clip_grad_norm(reference.parameters(), whole / 2) == whole);
  CHECK(std::abs(wf::train::clip_grad_norm(parallel.parameters(), shards, *group, whole / 2) - whole) <= 1e-12 * whole);
  const auto ref_params = reference.named_parameters(), tp_params = parallel.named_parameters();
  for (std::size_t i = 0; i < tp_params.size(); ++i) {
    INFO(tp_params[i].first);
    CHECK(mismatch(tp_params[i].second.grad(), slice_of(ref_params[i].second.grad(), shards[i]), 1e-12) == "");
  }
  // A shard split over another number of ranks than the group has is a bug, and is named.
  std::vector<wf::nn::ParameterShard> wrong = shards;
  for (auto& s : wrong) {
    if (s.is_sharded()) s.parts = group->size() + 1;
  }
  if (group->size() > 1) {
    CHECK_THROWS_WITH(wf::train::clip_grad_norm(parallel.parameters(), wrong, *group, inf),
                      Catch::Contains("but not over the tensor-parallel group"));
  }
}

TEST_CASE("tp activation sharding: shard_tokens, then the split region's two ends over the tokens",
          "[dist][tp]") {
  auto group = world_group("t.tp.sharded.region");
  const int P = group->size(), me = group->rank();
  const wf::parallel::TensorParallelOptions sharded{.shard_activations = true};
  const Shape whole_shape{2, 2 * P, 3};
  const Tensor whole = Tensor::randn_at(whole_shape, kInputSeed, 0, kF64);  // replicated
  const Tensor global_w = Tensor::randn_at(whole_shape, kWeightSeed, 0, kF64);

  Tensor x = whole.clone();
  x.set_requires_grad();
  const Tensor mine = wf::parallel::shard_tokens(*group, x);
  CHECK(mismatch(mine, token_slice(whole, *group, true)) == "");
  // column_parallel_input gathers every rank's tokens back into the whole x ...
  const Tensor gathered = wf::parallel::column_parallel_input(*group, mine, sharded);
  CHECK(mismatch(gathered, whole) == "");
  // ... each rank's "column layer" is its own scale, and row_parallel_output sums the partial
  // results and keeps this rank's tokens: Σ_r (r+1) · x on this rank's slice.
  const Tensor partial = wf::scale(gathered, static_cast<double>(me + 1));
  const Tensor out = wf::parallel::row_parallel_output(*group, partial, sharded);
  const double total = P * (P + 1) / 2.0;
  CHECK(mismatch(out, wf::scale(token_slice(whole, *group, true), total), reduction_tolerance(kF64)) == "");

  // Each rank's term weighs its tokens by its slice of W: L = Σ total · W ∘ x, dL/dx = total · W.
  backward_weighted_sum(out, token_slice(global_w, *group, true));
  CHECK(mismatch(x.grad(), wf::scale(global_w, total), reduction_tolerance(kF64)) == "");

  // Each end moves (P − 1)/P of the whole activation each way, as an all-reduce's halves do:
  // forward all-gather + reduce-scatter, backward all-gather + reduce-scatter, and shard_tokens'
  // backward all-gather.
  const std::int64_t volume = (P - 1) * whole.numel() * kF64Bytes / P;
  wf::comm::Traffic gathers, scatters;
  for (int i = 0; i < 3; ++i) gathers += one_call(volume, volume);
  for (int i = 0; i < 2; ++i) scatters += one_call(volume, volume);
  expect_traffic(*group, {{Primitive::all_gather, gathers}, {Primitive::reduce_scatter, scatters}});

  // Replicated, the two ends are copy_to_tp and reduce_from_tp, and shard_activations is off.
  const wf::parallel::TensorParallelLayers replicated(*group);
  CHECK(mismatch(replicated.shard_activations(whole), whole) == "");
  CHECK(replicated.activation_token_parts() == 1);
  CHECK(wf::parallel::TensorParallelLayers(*group, sharded).activation_token_parts() == P);

  if (P > 1) {  // tokens that do not divide over tp: the same error on every rank, no traffic
    const Tensor odd = Tensor::zeros({2, P + 1, 3}, kF64);
    const std::string sizes = fmt::format("splits the {} tokens of [2, {}, 3] over the {} ranks", P + 1, P + 1, P);
    CHECK_THAT(error_of([&] { wf::parallel::shard_tokens(*group, odd); }), Catch::Contains(sizes));
    CHECK_THAT(error_of([&] { wf::parallel::row_parallel_output(*group, odd, sharded); }), Catch::Contains(sizes));
    expect_traffic(*group, {});
  }
}

namespace {

// The feed-forward half of a pre-norm block, x + ff(norm(x)), built by the options' factory:
// the norm, the column → row feed-forward and its residual dropout.
class NormFeedForward : public wf::nn::Module {
 public:
  NormFeedForward(wf::nn::NormType norm, wf::nn::FeedForwardKind kind, const wf::nn::MLPOptions& options)
      : Module(options.seed) {
    norm_ = register_module("norm", wf::nn::layers_or_default(options.layers).norm(norm, options.d_model, 1e-5));
    if (kind == wf::nn::FeedForwardKind::mlp) {
      ff_ = register_module("ff", std::make_shared<wf::nn::MLP>(options));
    } else {
      ff_ = register_module("ff", std::make_shared<wf::nn::SwiGLU>(options));
    }
  }
  Tensor forward(const Tensor& x) { return wf::add(x, ff_->forward(norm_->forward(x))); }

 private:
  std::shared_ptr<wf::nn::Normalization> norm_;
  std::shared_ptr<wf::nn::FeedForward> ff_;
};

}  // namespace

TEST_CASE("tp norm + MLP / SwiGLU with dropout: the single-process masks, replicated or sharded by tokens",
          "[dist][tp]") {
  auto group = world_group("t.tp.norm_ff");
  const int P = group->size();
  // Every rank's default generator and the reference's start at the same state, as the Trainer
  // seeds the ranks of a tp group alike: the residual dropout then draws the single-process
  // mask (replicated) or this rank's token slice of it (sharded).
  const wf::Generator::State rng{2024, 7};
  const Forward forward = [rng](wf::nn::Module& m, const Tensor& x) {
    const wf::ReplayedGenerator same_masks(wf::RngSnapshot{rng, wf::generator_tracker().states()});
    return dynamic_cast<NormFeedForward&>(m).forward(x);
  };
  const std::pair<wf::nn::NormType, wf::nn::FeedForwardKind> kinds[] = {
      {wf::nn::NormType::layer_norm, wf::nn::FeedForwardKind::mlp},
      {wf::nn::NormType::rms_norm, wf::nn::FeedForwardKind::swiglu},
  };
  for (const bool shard : {false, true}) {
    const auto layers = std::make_shared<wf::parallel::TensorParallelLayers>(
        *group, wf::parallel::TensorParallelOptions{.shard_activations = shard});
    for (const auto& [norm, kind] : kinds) {
      for (const double p : {0.0, 0.3}) {
        for (const auto& [dtype, tolerance] : kPrecisions) {
          INFO(fmt::format("{} + {}, dropout {}, sharded {} in {} on {} ranks", wf::nn::norm_type_name(norm),
                           wf::nn::feed_forward_name(kind), p, shard, wf::dtype_name(dtype), P));
          wf::nn::MLPOptions options{.d_model = 8, .d_ff = 24, .dropout = p, .init_std = 0.2, .out_init_std = 0.1,
                                     .seed = 23};
          NormFeedForward reference(norm, kind, options);
          options.layers = layers;
          NormFeedForward parallel(norm, kind, options);
          // The norm's weight sees this rank's tokens only when they are sharded.
          const auto& norm_shard = parallel.parameter_shard("norm.weight");
          CHECK(norm_shard.partial_gradient_group == (shard ? group->name() : ""));
          CHECK((wf::nn::shard_str(norm_shard).find("gradient partial over") != std::string::npos) == shard);
          check_matches_single_process(reference, parallel, forward, {2, 4 * P, 8}, dtype, tolerance, *group, shard);
        }
      }
    }
  }
}

TEST_CASE("tp split-region dropout: per-rank masks from the tracker's stream, replayable from its state",
          "[dist][tp]") {
  auto group = world_group("t.tp.split_dropout");
  const int P = group->size(), me = group->rank();
  const wf::GeneratorTracker::States saved_tracker = wf::generator_tracker().states();
  const wf::parallel::TensorParallelLayers layers(*group);
  auto drop = layers.dropout(0.3, wf::nn::ActivationRegion::split);
  const Tensor x = Tensor::ones({4, 64}, kF64);  // the same on every rank: only the masks differ

  wf::parallel::seed_tensor_parallel_rng(/*base_seed=*/99, *group);
  const wf::Generator::State default_before = wf::default_generator().state();
  const wf::GeneratorTracker::States start = wf::generator_tracker().states();
  const Tensor y = drop->forward(x);
  // The draw came from the tracker's stream: the default generator did not move.
  CHECK(wf::default_generator().state().offset == default_before.offset);
  CHECK(wf::generator_tracker().state(wf::parallel::kTensorParallelRng).offset ==
        start.at(wf::parallel::kTensorParallelRng).offset + static_cast<std::uint64_t>(x.numel()));

  // Different ranks, different masks: every rank compares its mask with every other's.
  const Tensor all = group->all_gather(reshape(y, {1, y.numel()}));
  for (int r = 0; r < P; ++r) {
    if (r == me) continue;
    INFO("rank " << me << " against rank " << r);
    CHECK(mismatch(all.slice0(r, r + 1), all.slice0(me, me + 1)) != "");
  }

  // The next draw differs; restoring the saved tracker state draws the first mask again.
  const Tensor next = drop->forward(x);
  CHECK(mismatch(next, y) != "");
  wf::generator_tracker().set_states(start);
  CHECK(mismatch(drop->forward(x), y) == "");

  // Inside an activation checkpoint the recompute replays the stream: the gradient's mask is
  // the forward's (x is ones, so the gradient of sum(y) is y itself).
  wf::generator_tracker().set_states(start);
  Tensor leaf = x.clone();
  leaf.set_requires_grad();
  const Tensor checkpointed = wf::autograd::checkpoint(
      [drop](const wf::autograd::TensorList& in) { return wf::autograd::TensorList{drop->forward(in[0])}; },
      {leaf})[0];
  CHECK(mismatch(checkpointed, y) == "");
  (void)drop->forward(x);  // the stream moves on before the backward's recompute
  wf::sum(checkpointed).backward();
  CHECK(mismatch(leaf.grad(), y) == "");

  // An unseeded stream is named in the error.
  wf::generator_tracker().clear();
  CHECK_THAT(error_of([&] { drop->forward(x); }), Catch::Contains("seed_tensor_parallel_rng"));
  wf::generator_tracker().set_states(saved_tracker);
}

TEST_CASE("tp TransformerBlock with activation sharding matches the single-process block", "[dist][tp]") {
  auto group = world_group("t.tp.sharded.block");
  const int P = group->size();
  const auto layers = std::make_shared<wf::parallel::TensorParallelLayers>(
      *group, wf::parallel::TensorParallelOptions{.shard_activations = true});
  const wf::Generator::State rng{77, 3};  // the same on every rank and in the reference
  const Forward forward = [rng](wf::nn::Module& m, const Tensor& x) {
    const wf::ReplayedGenerator same_masks(wf::RngSnapshot{rng, wf::generator_tracker().states()});
    // Positions from the offset: the block attends over all tp · T/tp tokens.
    return dynamic_cast<wf::nn::TransformerBlock&>(m).forward(x, /*position_offset=*/0);
  };
  const std::pair<wf::nn::NormType, wf::nn::FeedForwardKind> kinds[] = {
      {wf::nn::NormType::layer_norm, wf::nn::FeedForwardKind::mlp},
      {wf::nn::NormType::rms_norm, wf::nn::FeedForwardKind::swiglu},
  };
  for (const auto& [norm, kind] : kinds) {
    for (const bool checkpoint : {false, true}) {
      for (const double p : {0.0, 0.3}) {
        for (const auto& [dtype, tolerance] : kPrecisions) {
          INFO(fmt::format("{} + {}, checkpoint {}, dropout {} in {} on {} ranks", wf::nn::norm_type_name(norm),
                           wf::nn::feed_forward_name(kind), checkpoint, p, wf::dtype_name(dtype), P));
          wf::nn::TransformerBlockOptions o{.d_model = 8 * P, .n_head = 2 * P, .n_kv_head = P, .d_ff = 8 * P,
                                            .norm = norm, .dropout = p, .init_std = 0.8 / std::sqrt(8.0 * P),
                                            .rope = true,
                                            .checkpoint_attention = checkpoint, .seed = 4,
                                            .feed_forward = kind};
          wf::nn::TransformerBlock reference(o);
          o.layers = layers;
          wf::nn::TransformerBlock parallel(o);
          check_matches_single_process(reference, parallel, forward, {2, 2 * P, 8 * P}, dtype, tolerance, *group,
                                       /*sharded_tokens=*/true);
        }
      }
    }
  }
}

// A row-parallel layer must not add the residual inside its product: its ranks' partial products
// are summed (and its bias added) after it. Its forward_add is add(residual, forward(x)) with that
// composition's bits, replicated and with activation sharding (this rank's tokens of the residual),
// and the whole layer's fused forward_add within f64 rounding.
TEST_CASE("tp RowParallelLinear::forward_add composes add(residual, forward(x))", "[dist][tp]") {
  auto group = world_group("t.tp.add");
  const std::int64_t P = group->size();
  const wf::nn::LinearOptions options{.in_features = 8 * P, .out_features = 6, .init_std = 0.3, .seed = 6};
  wf::nn::Linear whole(options);
  whole.to(kF64);
  const Tensor x = Tensor::randn_at({2, 2 * P, 8 * P}, kInputSeed, 0, kF64);
  const Tensor residual = Tensor::randn_at({2, 2 * P, 6}, kWeightSeed, 0, kF64);
  const Tensor expected = whole.forward_add(x, residual);
  for (const bool shard : {false, true}) {
    INFO(fmt::format("sharded {} on {} ranks", shard, P));
    wf::parallel::RowParallelLinear row(options, *group, /*input_is_parallel=*/true,
                                        wf::parallel::TensorParallelOptions{.shard_activations = shard});
    row.to(kF64);
    const Tensor x_local = wf::narrow(x, -1, group->rank() * 8, 8);
    const Tensor residual_local = token_slice(residual, *group, shard);
    const Tensor y = row.forward_add(x_local, residual_local);
    CHECK(y.grad_fn()->name() == "add");
    CHECK(mismatch(y, wf::add(residual_local, row.forward(x_local))) == "");
    CHECK(mismatch(y, token_slice(expected, *group, shard), 1e-12) == "");
  }
}

// ZeRO parity: ZeRO-1 and ZeRO-2 train the small GPT to ZeRO-0's losses, gradient norms and final
// weights, at layouts that cover dp, sp (every strategy), tp, gradient accumulation and
// activation checkpointing. Both trainers run the same config in this process over the same
// grid, one per stage; only the summation order of the reduce-scatter differs from the
// all-reduce's (and under ZeRO-2 with accumulation, microbatches are summed after the replicas
// instead of before).
//
// In f64, with 1e-10 relative bounds per step and per final weight tensor (relative to its
// largest entry) over 5 steps. Not f32: the key bias's gradient is zero up to rounding (a bias on
// every key shifts each query's scores alike, which softmax ignores), and Adam turns that
// rounding noise into updates of ±lr·(noise / (noise + eps)), which depend on the summation
// order at f32's 1e-7 noise (measured 1.5e-6 relative here) but not at f64's.
//
// Also: the replicas' optimizer pieces partition every parameter exactly (each element owned by
// one replica), so the optimizer state of one rank is 1/R of ZeRO-0's up to bucket padding.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/models/model.h"
#include "wallfacer/ops/ops.h"
#include "wallfacer/train/replica_gradients.h"
#include "wallfacer/train/step_traffic.h"
#include "wallfacer/train/trainer.h"

using wf::Tensor;
using namespace wf::test;

namespace {

struct ZeroLayout {
  int dp = 1, tp = 1, sp = 1, C = 1;
  wf::parallel::SpStrategy strategy = wf::parallel::SpStrategy::wallfacer;
  int accum = 1;
  bool checkpointed = false;
  std::string name() const {
    return fmt::format("dp{} x tp{} x sp{} {} C={}, accumulation {}{}", dp, tp, sp,
                       wf::parallel::sp_strategy_name(strategy), C, accum, checkpointed ? ", checkpointed" : "");
  }
};

wf::config::RunConfig zero_config(const ZeroLayout& layout, int zero) {
  wf::config::RunConfig c = small_gpt_run(layout.dp, layout.sp, layout.checkpointed, "wf-zero");
  c.parallel.tp = layout.tp;
  c.parallel.C = layout.C;
  c.parallel.sp_strategy = layout.strategy;
  c.parallel.zero = zero;
  c.parallel.grad_bucket_mb = 16.0 / 1024;  // 16 KiB: the small model spreads over many buckets
  c.train.steps = 5;
  c.train.global_batch_size = layout.dp * layout.accum;
  c.train.warmup_steps = 1;
  c.train.seed = 7;
  return c;
}

// Each case at the world size it needs: together they cover dp, sp (WallFacer with C 1 and 2,
// ring, Ulysses), tp, and their pairs, accumulation, activation checkpointing, and a replica
// group of 3 (uneven padding).
std::vector<ZeroLayout> zero_layouts(int world) {
  using wf::parallel::SpStrategy;
  switch (world) {
    case 2: return {{.dp = 2, .accum = 2}, {.sp = 2, .strategy = SpStrategy::ring, .checkpointed = true}};
    case 3: return {{.dp = 3}};
    case 4: return {{.dp = 2, .sp = 2}, {.dp = 2, .tp = 2, .accum = 2, .checkpointed = true}};
    case 8:
      return {{.dp = 4, .sp = 2},
              {.dp = 2, .tp = 2, .sp = 2, .checkpointed = true},
              {.dp = 2, .sp = 4, .C = 2, .accum = 2},
              {.dp = 2, .sp = 4, .strategy = SpStrategy::ulysses}};
    default: return {};
  }
}

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

TEST_CASE("ZeRO-1 and ZeRO-2 train to ZeRO-0's losses and weights", "[dist][train][zero]") {
  const int world = runtime().world_size();
  if (zero_layouts(world).empty()) {
    WARN("the ZeRO parity layouts run at 2, 3, 4 and 8 ranks; nothing to compare at " << world);
    SUCCEED();
  }
  for (const ZeroLayout& layout : zero_layouts(world)) {
    for (int zero : {1, 2}) {
      INFO(layout.name() << ", ZeRO-" << zero);
      const wf::config::RunConfig base = zero_config(layout, 0), config = zero_config(layout, zero);
      wf::config::validate(config, world);
      wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
      auto reference = trainer_in(base, grid, wf::DType::f64), sharded_trainer = trainer_in(config, grid, wf::DType::f64);
      wf::train::Trainer& sharded = *sharded_trainer;
      REQUIRE(sharded.gradients().zero() == zero);
      REQUIRE(sharded.gradients().layout().buckets().size() > 2);
      for (int step = 1; step <= config.train.steps; ++step) {
        INFO("step " << step);
        const auto r = reference->train_step();
        const auto s = sharded.train_step();
        CHECK(std::abs(s.loss - r.loss) <= 1e-10 * std::abs(r.loss));
        CHECK(std::abs(s.grad_norm - r.grad_norm) <= 1e-10 * r.grad_norm);
        const auto& stats = sharded.gradients().last_stats();
        CHECK(stats.launched_in_backward + stats.launched_at_end == stats.buckets);
      }
      const auto a = reference->model().named_parameters(), b = sharded.model().named_parameters();
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO(a[i].first);
        const auto x = a[i].second.to_vector<double>(), y = b[i].second.to_vector<double>();
        REQUIRE(x.size() == y.size());
        double worst = 0;
        for (std::size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]));
        CHECK(worst <= 1e-10 * largest(x));
      }
    }
  }
}

TEST_CASE("ZeRO: the replicas' optimizer pieces partition every parameter", "[dist][train][zero]") {
  const int world = runtime().world_size();
  if (world == 1) {
    SUCCEED("one rank: no replica group to shard over");
    return;
  }
  for (int zero : {1, 2}) {
    INFO("ZeRO-" << zero);  // ZeRO-2's buckets cut through parameters: several pieces of one parameter
    const wf::config::RunConfig config = zero_config({.dp = world}, zero);
    wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
    wf::train::Trainer trainer(config, grid);
    const auto& grads = trainer.gradients();
    const auto params = trainer.model().parameters();
    // Per parameter, how many of its elements this rank owns; summed over the replicas it must be
    // the parameter's size, and the pieces of one rank must not overlap.
    Tensor owned = Tensor::zeros({static_cast<std::int64_t>(params.size())}, wf::DType::f64);
    std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> ranges(params.size());
    std::int64_t mine = 0, total = 0;
    for (const auto& piece : grads.pieces()) {
      REQUIRE(piece.begin < piece.end);
      REQUIRE(piece.end <= params[piece.param].numel());
      const auto k = static_cast<std::int64_t>(piece.param);
      owned.set(k, owned.at(k) + static_cast<double>(piece.end - piece.begin));
      ranges[piece.param].push_back({piece.begin, piece.end});
      mine += piece.end - piece.begin;
    }
    for (auto& r : ranges) {
      std::sort(r.begin(), r.end());
      for (std::size_t i = 1; i < r.size(); ++i) CHECK(r[i - 1].second <= r[i].first);
    }
    for (const Tensor& p : params) total += p.numel();
    grid.group("dp_sp").all_reduce(owned);
    for (std::size_t k = 0; k < params.size(); ++k) {
      CHECK(owned.at(static_cast<std::int64_t>(k)) == params[k].numel());
    }
    // The optimizer state this rank holds: its share, up to the padding of each bucket.
    const std::int64_t padding = static_cast<std::int64_t>(grads.layout().buckets().size()) * (world - 1);
    CHECK(mine <= total / world + padding);
  }
}

namespace {

// A rank's deterministic input for microbatch `micro` of a parameter with n elements.
std::vector<double> input_of(int rank, int micro, std::size_t param, std::int64_t n) {
  std::vector<double> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(i)] = 0.25 * (rank + 1) - 0.5 * micro + 0.125 * static_cast<double>(param) + 0.01 * i;
  }
  return x;
}

}  // namespace

TEST_CASE("ReplicaGradients: sums over replicas and microbatches, skipped parameters, parameter gather",
          "[dist][train][zero]") {
  auto group = world_group("t.replica_gradients");
  const int R = group->size(), rank = group->rank();
  const std::vector<std::int64_t> sizes = {8, 5, 3, 7};
  for (int zero : {0, 1, 2}) {
    for (bool overlap : {false, true}) {
      INFO("ZeRO-" << zero << (overlap ? ", overlapped" : ", after the backward"));
      std::vector<Tensor> params;
      for (std::int64_t n : sizes) {
        params.push_back(Tensor::zeros({n}, wf::DType::f64));
        params.back().set_requires_grad(true);
      }
      // 40 bytes: about one parameter per bucket, so the skipped one shares a bucket with none.
      wf::train::ReplicaGradients grads(*group, params, {.zero = zero, .bucket_bytes = 40, .overlap = overlap});
      const int microbatches = 2;
      // Parameter 2 is used in microbatch 0 only: the last backward never reaches it.
      for (int micro = 0; micro < microbatches; ++micro) {
        grads.begin_backward(micro + 1 == microbatches);
        Tensor loss = Tensor::zeros({}, wf::DType::f64);
        for (std::size_t k = 0; k < params.size(); ++k) {
          if (k == 2 && micro == 1) continue;
          const Tensor x = Tensor::from_vector(input_of(rank, micro, k, sizes[k]), {sizes[k]});
          loss = wf::add(loss, wf::sum(wf::mul(params[k], x)));
        }
        loss.backward();
        grads.end_backward();
      }
      const auto& stats = grads.last_stats();
      if (R > 1) CHECK(stats.launched_in_backward == (overlap ? stats.buckets : 0));
      // The expected sum of parameter k's element i: over ranks and the microbatches that used it.
      const auto expected = [&](std::size_t k, std::int64_t i) {
        double total = 0;
        for (int r = 0; r < R; ++r) {
          for (int m = 0; m < microbatches; ++m) {
            if (!(k == 2 && m == 1)) total += input_of(r, m, k, sizes[k])[static_cast<std::size_t>(i)];
          }
        }
        return total;
      };
      REQUIRE(grads.pieces().size() == grads.optimizer_params().size());
      for (std::size_t p = 0; p < grads.pieces().size(); ++p) {
        const auto& piece = grads.pieces()[p];
        const Tensor g = grads.optimizer_params()[p].grad();
        REQUIRE(g.numel() == piece.end - piece.begin);
        for (std::int64_t i = piece.begin; i < piece.end; ++i) {
          CHECK(g.at(i - piece.begin) == Approx(expected(piece.param, i)).epsilon(1e-12));
        }
      }
      // Each replica writes its pieces; after the gather every replica holds every value.
      for (std::size_t p = 0; p < grads.pieces().size(); ++p) {
        Tensor view = grads.optimizer_params()[p];
        for (std::int64_t i = 0; i < view.numel(); ++i) {
          view.set(i, 100.0 * static_cast<double>(grads.pieces()[p].param) + static_cast<double>(grads.pieces()[p].begin + i));
        }
      }
      grads.gather_parameters();
      for (std::size_t k = 0; k < params.size(); ++k) {  // (ZeRO-0's pieces are the whole parameters)
        for (std::int64_t i = 0; i < sizes[k]; ++i) CHECK(params[k].at(i) == 100.0 * static_cast<double>(k) + i);
      }
      grads.zero_grad();
    }
  }
}

// parallel.grad_reduce_dtype: bf16. Each rank's f32 gradient is rounded to bf16, every combine
// adds two bf16 values in f32 and rounds once, and the sum is widened back into f32. With
// positive terms the error is below one bf16 rounding (2^-8 relative) per term and per combine,
// so |got − exact| ≤ 2R·2^-8·exact; with two replicas the result is exactly
// bf16(bf16(a) + bf16(b)), which pins the f32 accumulation (a bf16 accumulation of the same two
// terms agrees, but any third term would round twice).
TEST_CASE("ReplicaGradients: gradients reduced in bf16 with f32 accumulation, at every ZeRO stage",
          "[dist][train][zero][bf16]") {
  auto group = world_group("t.replica_gradients_bf16");
  const int R = group->size(), rank = group->rank();
  const std::vector<std::int64_t> sizes = {9, 4, 6};
  // Positive and well inside bf16's range; rank-dependent so the replicas differ.
  const auto value = [](int r, std::size_t k, std::int64_t i) {
    return 1.0f + 0.37f * static_cast<float>(r) + 0.011f * static_cast<float>(i) + 0.29f * static_cast<float>(k);
  };
  for (int zero : {0, 1, 2}) {
    INFO("ZeRO-" << zero);
    std::vector<Tensor> params;
    for (std::int64_t n : sizes) {
      params.push_back(Tensor::zeros({n}, wf::DType::f32));
      params.back().set_requires_grad(true);
    }
    wf::train::ReplicaGradients grads(*group, params,
                                      {.zero = zero, .bucket_bytes = 32, .reduce_dtype = wf::DType::bf16});
    const std::int64_t before = group->traffic().total().bytes_sent;
    grads.begin_backward(true);
    Tensor loss = Tensor::zeros({}, wf::DType::f32);
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::vector<float> x(static_cast<std::size_t>(sizes[k]));
      for (std::int64_t i = 0; i < sizes[k]; ++i) x[static_cast<std::size_t>(i)] = value(rank, k, i);
      loss = wf::add(loss, wf::sum(wf::mul(params[k], Tensor::from_vector(x, {sizes[k]}))));
    }
    loss.backward();
    grads.end_backward();
    // The bytes are the bf16 buckets': what gradient_sync_bytes predicts for bf16, less the loss
    // totals the Trainer adds (not sent here).
    const std::int64_t loss_totals = R > 1 ? wf::train::all_reduce_bytes(2 * sizeof(double), R) : 0;
    const std::int64_t clip = R > 1 && zero > 0 ? loss_totals : 0;
    const std::int64_t gathers = [&] {  // ZeRO ≥ 1's parameter all-gather, not posted yet
      if (R == 1 || zero == 0) return std::int64_t{0};
      std::int64_t bytes = 0;
      for (const auto& b : grads.layout().buckets()) bytes += (R - 1) * (b.numel * 4 / R);
      return bytes;
    }();
    CHECK(group->traffic().total().bytes_sent - before ==
          wf::train::gradient_sync_bytes(grads.layout(), R, zero, 1, wf::DType::bf16) - loss_totals - clip - gathers);
    for (std::size_t p = 0; p < grads.pieces().size(); ++p) {
      const auto& piece = grads.pieces()[p];
      const Tensor g = grads.optimizer_params()[p].grad();
      for (std::int64_t i = piece.begin; i < piece.end; ++i) {
        double exact = 0;
        for (int r = 0; r < R; ++r) exact += value(r, piece.param, i);
        const double got = g.at(i - piece.begin);
        if (R == 1) {
          CHECK(got == static_cast<double>(value(0, piece.param, i)));  // nothing reduced, nothing rounded
        } else if (R == 2) {
          const float a = wf::bf16_to_float(wf::float_to_bf16(value(0, piece.param, i)));
          const float b = wf::bf16_to_float(wf::float_to_bf16(value(1, piece.param, i)));
          CHECK(got == static_cast<double>(wf::bf16_to_float(wf::float_to_bf16(a + b))));
        } else {
          CHECK(std::abs(got - exact) <= 2.0 * R * std::ldexp(1.0, -8) * exact);
        }
      }
    }
  }
}

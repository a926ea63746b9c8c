// parallel::detail::SkipBlockCompute, the scope `wallfacer bench attention` times a strategy's
// communication alone with: inside it block attention (and Ulysses' local attention) computes
// nothing and leaves its outputs as a row that saw no key (o = 0, lse = −inf, gradients 0), so no
// NaN or uninitialised value reaches the strategies' merges and messages; outside it nothing changes.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "support/sp_cases.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sp_strategy.h"

using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::parallel::BlockAttentionStats;
using wf::parallel::detail::SkipBlockCompute;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool all_equal(const Tensor& t, double value) {
  for (double x : t.to(Device::cpu()).to_vector<double>()) {
    if (x != value) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("SkipBlockCompute makes block attention compute nothing while it lives", "[parallel]") {
  const wf::parity::BlockProblem p = wf::parity::block_problem(DType::f32);
  const std::vector<wf::parallel::TokenRun>& kv_runs = p.kv_runs[0];
  const Tensor k = p.k[0], v = p.v[0];
  Tensor o = Tensor::zeros(p.q.shape(), DType::f32);
  Tensor lse = Tensor::full({p.q.size(0), p.q.size(2), p.q.size(1)}, -kInf, DType::f32);
  {
    const SkipBlockCompute skip;
    CHECK(SkipBlockCompute::active());
    const BlockAttentionStats none =
        wf::parallel::block_attention_forward(p.q, p.q_runs, k, v, kv_runs, true, 0.5, o, lse);
    CHECK(none == BlockAttentionStats{});
    CHECK(all_equal(o, 0.0));
    CHECK(all_equal(lse, -kInf));
  }
  CHECK_FALSE(SkipBlockCompute::active());
  const BlockAttentionStats done =
      wf::parallel::block_attention_forward(p.q, p.q_runs, k, v, kv_runs, true, 0.5, o, lse);
  CHECK(done.blocks_computed > 0);
  CHECK_FALSE(all_equal(o, 0.0));
}

TEST_CASE("under SkipBlockCompute every strategy returns what no key gives, on the CPU and the test device",
          "[parallel][test_device]") {
  const wf::parallel::SpStrategy strategy = GENERATE(wf::parallel::SpStrategy::ring, wf::parallel::SpStrategy::ulysses,
                                                     wf::parallel::SpStrategy::wallfacer);
  const Device device = GENERATE(Device::cpu(), Device::test());
  INFO(wf::parallel::sp_strategy_name(strategy) << " on " << device.str());
  const auto attention = wf::parity::attention_at_sp1(strategy);
  wf::parity::StrategyResult r;
  {
    const SkipBlockCompute skip;
    r = wf::parity::run_strategy(*attention, DType::f32, device);
  }
  CHECK(r.out.device() == device);
  CHECK(all_equal(r.out, 0.0));
  CHECK(all_equal(r.lse, -kInf));
  for (const Tensor* grad : {&r.dq, &r.dk, &r.dv}) CHECK(all_equal(*grad, 0.0));
  // Outside the scope the same call computes again.
  const wf::parity::StrategyResult computed = wf::parity::run_strategy(*attention, DType::f32, device);
  CHECK_FALSE(all_equal(computed.out, 0.0));
  CHECK(std::isfinite(computed.lse.to(Device::cpu()).to_vector<double>()[0]));
}

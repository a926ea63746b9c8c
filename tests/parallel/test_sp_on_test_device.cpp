// Sequence-parallel attention's local computation on the test device (src/core/test_device.h),
// whose memory faults on any host touch: so a kernels::cpu call, a loop over data<T>() or a
// memcpy of its tensors anywhere on these paths ends the test. Each computation runs on the
// CPU and on the test device (inline and with asynchronous, randomly delayed streams), and the
// results must be the same bits, with no host synchronisation while it computes:
//   - block attention over two K/V blocks merged, forward and backward with a gradient on lse;
//   - ring, Ulysses and WallFacer at sp = 1 (in one process: no message, but every strategy's
//     own tensors, its Ulysses exchange with itself and WallFacer's D on the device);
//   - the backend entries WallFacer's combine and Ulysses' message use (kernels/backend.h).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "src/core/test_device_streams.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sp_attention.h"
#include "wallfacer/parallel/sp_strategy.h"

using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::parallel::TokenRun;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Same dtype, shape and bytes, `got` (any device) against `want` (CPU).
bool same_bits(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(Device::cpu());
  return g.dtype() == want.dtype() && g.shape() == want.shape() &&
         std::memcmp(g.raw_data(), want.raw_data(), want.nbytes()) == 0;
}

// Turns the test device's asynchronous streams on for one scope.
class AsyncScope {
 public:
  explicit AsyncScope(bool on) : on_(on) {
    if (on_) wf::detail::set_test_device_async(true);
  }
  ~AsyncScope() {
    if (on_) wf::detail::set_test_device_async(false);
  }
  AsyncScope(const AsyncScope&) = delete;
  AsyncScope& operator=(const AsyncScope&) = delete;

 private:
  bool on_;
};

// ---- block attention over two K/V blocks ------------------------------------------------------

struct BlockProblem {
  Tensor q, d_o, d_lse;
  Tensor k[2], v[2];
  std::vector<TokenRun> q_runs{{0, 4}, {12, 4}};  // zigzag-like: the first and last quarter
  std::vector<TokenRun> kv_runs[2] = {{{4, 4}, {8, 4}}, {{0, 4}, {12, 4}}};
};

BlockProblem block_problem(DType dtype) {
  const DType acc = dtype == DType::bf16 ? DType::f32 : dtype;
  BlockProblem p;
  p.q = Tensor::randn_at({2, 8, 4, 4}, 31, 0, dtype);
  p.d_o = Tensor::randn_at({2, 8, 4, 4}, 31, 1000, dtype);
  p.d_lse = Tensor::randn_at({2, 4, 8}, 31, 2000, acc);
  for (int j = 0; j < 2; ++j) {
    p.k[j] = Tensor::randn_at({2, 8, 2, 4}, 32 + j, 0, dtype);
    p.v[j] = Tensor::randn_at({2, 8, 2, 4}, 32 + j, 1000, dtype);
  }
  return p;
}

struct BlockResult {
  Tensor o, lse, dq, dk[2], dv[2];
};

// Both blocks merged into (o, lse), then both backwards with the gradient on lse, on `device`.
BlockResult run_blocks(const BlockProblem& p, Device device, std::int64_t* host_syncs) {
  const DType acc = p.q.dtype() == DType::bf16 ? DType::f32 : p.q.dtype();
  const Tensor q = p.q.to(device), d_o = p.d_o.to(device), d_lse = p.d_lse.to(device);
  const Tensor k[2] = {p.k[0].to(device), p.k[1].to(device)}, v[2] = {p.v[0].to(device), p.v[1].to(device)};
  BlockResult r;
  r.o = Tensor::zeros(q.shape(), acc, device);
  r.lse = Tensor::full({2, 4, 8}, -kInf, acc, device);
  r.dq = Tensor::zeros(q.shape(), acc, device);
  for (int j = 0; j < 2; ++j) {
    r.dk[j] = Tensor::zeros(k[j].shape(), acc, device);
    r.dv[j] = Tensor::zeros(k[j].shape(), acc, device);
  }
  const std::int64_t before = wf::host_sync_count();
  for (int j = 0; j < 2; ++j) {
    wf::parallel::block_attention_forward(q, p.q_runs, k[j], v[j], p.kv_runs[j], /*causal=*/true, 0.0, r.o, r.lse);
  }
  for (int j = 0; j < 2; ++j) {
    wf::parallel::block_attention_backward(q, p.q_runs, k[j], v[j], p.kv_runs[j], true, 0.0, r.o, r.lse, d_o, d_lse,
                                           r.dq, r.dk[j], r.dv[j]);
  }
  *host_syncs = wf::host_sync_count() - before;
  return r;
}

}  // namespace

TEST_CASE("block attention on the test device gives the CPU's bits, with no host synchronisation",
          "[parallel][test_device]") {
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  const bool async = GENERATE(false, true);
  INFO(wf::dtype_name(dtype) << (async ? ", asynchronous streams" : ", inline streams"));
  const BlockProblem p = block_problem(dtype);
  std::int64_t cpu_syncs = 0, device_syncs = 0;
  const BlockResult want = run_blocks(p, Device::cpu(), &cpu_syncs);
  AsyncScope scope(async);
  const BlockResult got = run_blocks(p, Device::test(), &device_syncs);
  CHECK(device_syncs == 0);
  CHECK(same_bits(got.o, want.o));
  CHECK(same_bits(got.lse, want.lse));
  CHECK(same_bits(got.dq, want.dq));
  for (int j = 0; j < 2; ++j) {
    CHECK(same_bits(got.dk[j], want.dk[j]));
    CHECK(same_bits(got.dv[j], want.dv[j]));
  }
}

// ---- the strategies at sp = 1 -----------------------------------------------------------------

namespace {

struct StrategyResult {
  Tensor out, lse, dq, dk, dv;
};

// Forward, then backward of Σ out·g_out + Σ lse·g_lse, through `strategy` on `device`.
StrategyResult run_strategy(wf::nn::AttentionStrategy& strategy, DType dtype, Device device) {
  Tensor q = Tensor::randn_at({2, 8, 4, 4}, 41, 0, dtype).to(device);
  Tensor k = Tensor::randn_at({2, 8, 2, 4}, 42, 0, dtype).to(device);
  Tensor v = Tensor::randn_at({2, 8, 2, 4}, 43, 0, dtype).to(device);
  const Tensor g_out = Tensor::randn_at({2, 8, 4, 4}, 44, 0, dtype).to(device);
  const Tensor g_lse = Tensor::randn_at({2, 4, 8}, 45, 0, dtype).to(device);
  q.set_requires_grad();
  k.set_requires_grad();
  v.set_requires_grad();
  const wf::AttentionResult r = strategy.forward(q, k, v, {.causal = true});
  wf::add(wf::sum(wf::mul(r.out, g_out)), wf::sum(wf::mul(r.lse, g_lse))).backward();
  return {r.out, r.lse, q.grad(), k.grad(), v.grad()};
}

}  // namespace

TEST_CASE("ring, Ulysses and WallFacer at sp = 1 give the CPU's bits on the test device", "[parallel][test_device]") {
  wf::comm::Runtime::init();  // a world of one: no mpirun needed
  wf::comm::ParallelConfig config;
  static wf::comm::CommGrid grid(wf::comm::ProcessGrid(config, 1, 0));
  const wf::parallel::SpStrategy strategy =
      GENERATE(wf::parallel::SpStrategy::ring, wf::parallel::SpStrategy::ulysses, wf::parallel::SpStrategy::wallfacer);
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  const bool async = GENERATE(false, true);
  INFO(wf::parallel::sp_strategy_name(strategy) << ", " << wf::dtype_name(dtype)
                                                << (async ? ", asynchronous streams" : ", inline streams"));
  const wf::parallel::SpAttentionConfig sp{strategy, wf::parallel::SequenceLayout::zigzag, 8, true};
  const auto attention = wf::parallel::make_sp_attention(sp, grid);
  const StrategyResult want = run_strategy(*attention, dtype, Device::cpu());
  AsyncScope scope(async);
  const StrategyResult got = run_strategy(*attention, dtype, Device::test());
  CHECK(got.out.device() == Device::test());
  CHECK(same_bits(got.out, want.out));
  CHECK(same_bits(got.lse, want.lse));
  CHECK(same_bits(got.dq, want.dq));
  CHECK(same_bits(got.dk, want.dk));
  CHECK(same_bits(got.dv, want.dv));
}

// ---- the backend entries of the sp strategies -------------------------------------------------

TEST_CASE("the sp backend entries give the CPU's bits on the test device", "[parallel][test_device]") {
  const DType dtype = GENERATE(DType::f64, DType::f32);
  const bool async = GENERATE(false, true);
  INFO(wf::dtype_name(dtype) << (async ? ", asynchronous streams" : ", inline streams"));
  AsyncScope scope(async);
  const std::int64_t B = 2, n = 5, h = 3, d = 4, members = 3, rows = B * h * n;
  Tensor all = Tensor::randn_at({members, rows}, 51, 0, dtype);
  all.set(7, -kInf);  // member 0 saw no key for row 7
  const Tensor o = Tensor::randn_at({B, n, h, d}, 52, 0, dtype), d_o = Tensor::randn_at({B, n, h, d}, 53, 0, dtype);
  const Tensor d_lse = Tensor::randn_at({B, h, n}, 54, 0, dtype);

  struct Outputs {
    Tensor lse_star, weight, scaled, minus_delta, message, summed;
  };
  const auto run = [&](Device device) {
    wf::kernels::Backend& k = wf::kernels::backend_for(device);
    const wf::Stream stream = wf::Stream::current(device);
    const Tensor all_d = all.to(device), d_o_d = d_o.to(device), d_lse_d = d_lse.to(device);
    Outputs out{Tensor::empty({B, h, n}, dtype, device), Tensor::empty({B, h, n}, dtype, device),
                o.clone().to(device),                    Tensor::empty({B, h, n}, dtype, device),
                Tensor(),                                Tensor::zeros({B, n, h, d}, dtype, device)};
    k.team_lse_combine(stream, dtype, static_cast<int>(members), rows, 0, all_d.raw_data(), out.lse_star.raw_data(),
                       out.weight.raw_data());
    k.scale_attention_rows(stream, dtype, B, n, h, d, out.scaled.raw_data(), out.weight.raw_data());
    k.attention_minus_delta(stream, dtype, B, n, h, d, d_o_d.raw_data(), out.scaled.raw_data(), d_lse_d.raw_data(),
                            out.minus_delta.raw_data());
    // Heads 1 and 2 of tokens 3, 0, 4 packed as bf16, then added twice into a zero tensor.
    wf::kernels::UlyssesBlock block;
    block.dtype = dtype;
    block.wire = DType::bf16;
    block.batch = B;
    block.tokens = n;
    block.heads = h;
    block.width = d;
    block.first_head = 1;
    block.block_heads = 2;
    block.rows = {3, 0, 4};
    out.message = Tensor::empty({block.bytes()}, DType::u8, device);
    k.ulysses_block(stream, block, out.scaled.raw_data(), out.message.raw_data());
    block.move = wf::kernels::BlockMove::unpack_add;
    k.ulysses_block(stream, block, out.summed.raw_data(), out.message.raw_data());
    k.ulysses_block(stream, block, out.summed.raw_data(), out.message.raw_data());
    return out;
  };
  const Outputs want = run(Device::cpu());
  const Outputs got = run(Device::test());
  CHECK(same_bits(got.lse_star, want.lse_star));
  CHECK(same_bits(got.weight, want.weight));
  CHECK(same_bits(got.scaled, want.scaled));
  CHECK(same_bits(got.minus_delta, want.minus_delta));
  CHECK(same_bits(got.message, want.message));
  CHECK(same_bits(got.summed, want.summed));
  CHECK(want.weight.at(7) == 0.0);  // not a vacuous comparison: the -inf row and the sum are there
  CHECK(want.summed.at({0, 3, 1, 0}) != 0.0);
}

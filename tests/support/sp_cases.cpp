// The shared sequence-parallel and vocabulary-parallel cases (tests/support/sp_cases.h).
#include "support/sp_cases.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "kernels/backend.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parity {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kIgnore = -100;

}  // namespace

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
  const std::int64_t before = host_sync_count();
  for (int j = 0; j < 2; ++j) {
    parallel::block_attention_forward(q, p.q_runs, k[j], v[j], p.kv_runs[j], /*causal=*/true, 0.0, r.o, r.lse);
  }
  for (int j = 0; j < 2; ++j) {
    parallel::block_attention_backward(q, p.q_runs, k[j], v[j], p.kv_runs[j], true, 0.0, r.o, r.lse, d_o, d_lse, r.dq,
                                       r.dk[j], r.dv[j]);
  }
  *host_syncs = host_sync_count() - before;
  return r;
}

std::shared_ptr<nn::AttentionStrategy> attention_at_sp1(parallel::SpStrategy strategy) {
  comm::Runtime::init();
  static comm::CommGrid grid(comm::ProcessGrid(comm::ParallelConfig{}, 1, 0));
  return parallel::make_sp_attention({strategy, parallel::SequenceLayout::zigzag, 8, true}, grid);
}

StrategyResult run_strategy(nn::AttentionStrategy& strategy, DType dtype, Device device,
                            const AttentionOptions& options) {
  Tensor q = Tensor::randn_at({2, 8, 4, 4}, 41, 0, dtype).to(device);
  Tensor k = Tensor::randn_at({2, 8, 2, 4}, 42, 0, dtype).to(device);
  Tensor v = Tensor::randn_at({2, 8, 2, 4}, 43, 0, dtype).to(device);
  const Tensor g_out = Tensor::randn_at({2, 8, 4, 4}, 44, 0, dtype).to(device);
  const Tensor g_lse = Tensor::randn_at({2, 4, 8}, 45, 0, dtype).to(device);
  q.set_requires_grad();
  k.set_requires_grad();
  v.set_requires_grad();
  const AttentionResult r = strategy.forward(q, k, v, options);
  add(sum(mul(r.out, g_out)), sum(mul(r.lse, g_lse))).backward();
  return {r.out, r.lse, q.grad(), k.grad(), v.grad()};
}

SpEntryOutputs run_sp_entries(DType dtype, Device device) {
  const std::int64_t B = 2, n = 5, h = 3, d = 4, members = 3, rows = B * h * n;
  Tensor all = Tensor::randn_at({members, rows}, 51, 0, dtype);
  all.set(7, -kInf);  // member 0 saw no key for row 7
  const Tensor o = Tensor::randn_at({B, n, h, d}, 52, 0, dtype), d_o = Tensor::randn_at({B, n, h, d}, 53, 0, dtype);
  const Tensor d_lse = Tensor::randn_at({B, h, n}, 54, 0, dtype);
  kernels::Backend& k = kernels::backend_for(device);
  const Stream stream = Stream::current(device);
  const Tensor all_d = all.to(device), d_o_d = d_o.to(device), d_lse_d = d_lse.to(device);
  SpEntryOutputs out{Tensor::empty({B, h, n}, dtype, device), Tensor::empty({B, h, n}, dtype, device),
                     o.clone().to(device),                    Tensor::empty({B, h, n}, dtype, device),
                     Tensor(),                                Tensor::zeros({B, n, h, d}, dtype, device)};
  k.team_lse_combine(stream, dtype, static_cast<int>(members), rows, 0, all_d.raw_data(), out.lse_star.raw_data(),
                     out.weight.raw_data());
  k.scale_attention_rows(stream, dtype, B, n, h, d, out.scaled.raw_data(), out.weight.raw_data());
  k.attention_minus_delta(stream, dtype, B, n, h, d, d_o_d.raw_data(), out.scaled.raw_data(), d_lse_d.raw_data(),
                          out.minus_delta.raw_data());
  // Heads 1 and 2 of tokens 3, 0, 4 packed as bf16, then added twice into a zero tensor.
  kernels::UlyssesBlock block;
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
  block.move = kernels::BlockMove::unpack_add;
  k.ulysses_block(stream, block, out.summed.raw_data(), out.message.raw_data());
  k.ulysses_block(stream, block, out.summed.raw_data(), out.message.raw_data());
  return out;
}

VocabPieces run_vocab_parallel_entries(Device device, bool mean) {
  const std::int64_t rows = 5, vocab = 10, parts = 3, k = 4;  // padded to 12: the last rank holds 2 real columns
  const Tensor logits = Tensor::randn_at({parts, rows, k}, 7, 0, DType::f32);
  const Tensor targets = Tensor::from_vector(std::vector<std::int64_t>{3, kIgnore, 9, 0, 6}, {rows});
  kernels::Backend& b = kernels::backend_for(device);
  const Stream s = Stream::current(device);
  const Tensor x = logits.to(device), t = targets.to(device);
  VocabPieces p{Tensor::empty({}, DType::i64, device), Tensor(), Tensor(), Tensor::empty({rows}, DType::f64, device),
                Tensor::empty({}, DType::f64, device), Tensor::empty({parts, rows, k}, DType::f32, device)};
  b.count_targets(s, "test", rows, vocab, t.data<std::int64_t>(), kIgnore, p.count.data<std::int64_t>());
  const auto own = [&](std::int64_t r) { return std::clamp(vocab - r * k, std::int64_t{0}, k); };
  // The max all-reduce, on host copies.
  std::vector<double> max(rows, -1e300);
  for (std::int64_t r = 0; r < parts; ++r) {
    Tensor m = Tensor::empty({rows}, DType::f64, device);
    b.vocab_parallel_row_max(s, DType::f32, rows, k, own(r), x.slice0(r, r + 1).data<float>(), m.data<double>());
    const std::vector<double> got = m.to(Device::cpu()).to_vector<double>();
    for (std::int64_t i = 0; i < rows; ++i) max[i] = std::max(max[i], got[i]);
  }
  p.max = Tensor::from_vector(max, {rows}).to(device);
  std::vector<double> sums(2 * rows, 0.0);
  for (std::int64_t r = 0; r < parts; ++r) {
    Tensor part = Tensor::empty({2 * rows}, DType::f64, device);
    b.vocab_parallel_partials(s, DType::f32, rows, k, own(r), r * k, x.slice0(r, r + 1).data<float>(),
                              p.max.data<double>(), t.data<std::int64_t>(), kIgnore, part.data<double>());
    const std::vector<double> got = part.to(Device::cpu()).to_vector<double>();
    for (std::int64_t i = 0; i < 2 * rows; ++i) sums[i] += got[i];
  }
  p.sums = Tensor::from_vector(sums, {2 * rows}).to(device);
  b.vocab_parallel_loss(s, rows, p.max.data<double>(), p.sums.data<double>(), t.data<std::int64_t>(), kIgnore,
                        mean ? p.count.data<std::int64_t>() : nullptr, p.lse.data<double>(), p.loss.data<double>());
  const Tensor grad = Tensor::full({}, 0.5, DType::f32, device);
  for (std::int64_t r = 0; r < parts; ++r) {
    Tensor d = p.dx.slice0(r, r + 1);
    b.vocab_parallel_backward(s, DType::f32, rows, k, own(r), r * k, x.slice0(r, r + 1).data<float>(),
                              t.data<std::int64_t>(), kIgnore, p.lse.data<double>(), grad.data<float>(),
                              mean ? p.count.data<std::int64_t>() : nullptr, d.data<float>());
  }
  return p;
}

std::pair<Tensor, Tensor> run_vocab_parallel_local_ids(Device device) {
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{0, 4, 5, 9, 3, 7}, {6});
  Tensor local = Tensor::empty({6}, DType::i64, device), mask = Tensor::empty({6}, DType::f64, device);
  kernels::backend_for(device).vocab_parallel_local_ids(Stream::current(device), "test", 6, 10, 4, 3,
                                                        ids.to(device).data<std::int64_t>(),
                                                        local.data<std::int64_t>(), mask.data<double>());
  return {local, mask};
}

Tensor run_replica_spread(Device device) {
  const Tensor own = Tensor::randn_at({5}, 3, 0, DType::f64), extremes = Tensor::randn_at({10}, 3, 10, DType::f64);
  Tensor found = Tensor::empty({4}, DType::f64, device);
  kernels::backend_for(device).replica_spread(Stream::current(device), 5, {2, 5}, extremes.to(device).data<double>(),
                                              own.to(device).data<double>(), found.data<double>());
  return found;
}

}  // namespace wf::parity

// Ulysses attention: one all-to-all turns the sequence-sharded q, k, v (this rank's N/P tokens,
// every head) into head-sharded ones (every token, h/P query heads and the kv heads they read),
// each rank runs attention over the whole sequence for its heads, and one all-to-all brings O
// back. The backward is the adjoint: dO in, the attention backward, dQ, dK, dV out.
//
// Heads (ulysses_heads.h): head-side rank r holds query heads [r·h/P, (r+1)·h/P) and kv heads
// from r·h_kv/P on: h_kv/P of them when P divides h_kv. When h_kv < P (dividing P) that first
// head r·h_kv/P = r/(P/h_kv) is the one kv head its query heads read, and the P/h_kv ranks
// sharing it each get a copy: the sequence side sends the same K/V slice to all of them. The
// adjoint of that copy is a sum, so on the way back the sequence side adds up the dK, dV the
// sharers return (in rank order: deterministic).
//
// Packing: Q, K and V travel in ONE all-to-all (the same bytes as three, one latency), as do
// O and lse, dO and d_lse, and dQ, dK and dV. While unpacking, the gathered tokens are put in
// position order, so the local attention is one kernel call with a plain causal mask whatever
// the sequence layout; the packing for the way back reads them from there.
//
// Traffic (per rank, per pass): traffic_model.h's ulysses_traffic,
// (P−1)/P·((2E + 2E_kv·ρ)·a + R·s), ρ = max(1, P/h_kv) copies of each kv head, R = B·(N/P)·h:
// the R term is lse (forward) and its gradient (backward), which must travel because the
// nn::AttentionStrategy contract returns lse on the sequence shard. It rides in the O (dO)
// message, so the message count is that of two all-to-alls per pass.
//
// Replay (activation checkpointing at the attention output): the Function saves the
// sequence-sharded q, k, v and the replayed out and lse, and moves nothing. Its backward sends
// them to the head side in the dO all-to-all (the forward's bytes, no extra message), so
// nothing head-sharded is held between the replay and its backward, and the head-side O and
// lse are the forward's bit for bit (the all-to-alls only copy).
#include "src/parallel/ulysses_attention.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "src/parallel/sp_strategy_base.h"
#include "src/parallel/ulysses_exchange.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/ulysses_heads.h"

namespace wf::parallel {
namespace {

using autograd::Context;
using autograd::TensorList;
using detail::Field;
using detail::heads_major;
using detail::Positions;  // [rank][i]: global position of its i-th token
using detail::Side;
using detail::tokens_major;
using detail::ulysses_exchange;

// The head-sharded side of one call: every token, h/P query heads and their kv heads.
detail::HeadSide head_side(const kernels::cpu::AttentionShape& s, DType dtype) {
  return {s.batch, s.q_len, s.heads, s.kv_heads, s.head_dim, dtype};
}

class UlyssesAttentionFunction final : public autograd::Function {
 public:
  UlyssesAttentionFunction(comm::Group& sp, Positions positions, std::int64_t kv_heads, bool causal, double scale,
                           std::shared_ptr<detail::WorkRecord> work, detail::Replayed replayed)
      : sp_(sp),
        positions_(std::move(positions)),
        kv_heads_(kv_heads),
        causal_(causal),
        scale_(scale),
        work_(std::move(work)),
        replayed_(std::move(replayed)),
        sequence_side_saved_(replayed_.has_value()) {}

  // inputs: q, k, v (this rank's shard); outputs: o, lse. Saved: the head-sharded q, k, v, o,
  // lse; in a replay the sequence-sharded ones (q, k, v and the replayed o, lse).
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor &q = in[0], &k = in[1], &v = in[2];
    if (auto replay = detail::save_replay(ctx, in, replayed_)) return *replay;
    const kernels::cpu::AttentionShape s = shape_of(q, k);
    return dispatch_float(q.dtype(), "ulysses attention", [&](auto tag) {
      using T = decltype(tag);
      detail::HeadSide h = head_side(s, q.dtype());
      ulysses_exchange(sp_, positions_, Side::sequence, {tokens_major(q), tokens_major(k), tokens_major(v)},
                  {tokens_major(h.q), tokens_major(h.k), tokens_major(h.v)});
      kernels::cpu::attention_forward<T>(s, h.q.data<T>(), h.k.data<T>(), h.v.data<T>(), h.o.data<T>(),
                                         h.lse.data<T>());
      Tensor o = Tensor::empty(q.shape(), q.dtype()), lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, q.dtype());
      ulysses_exchange(sp_, positions_, Side::heads, {tokens_major(h.o), heads_major(h.lse)},
                  {tokens_major(o), heads_major(lse)});
      work_->forward = work(s);
      ctx.save_for_backward({h.q, h.k, h.v, h.o, h.lse});
      return TensorList{o, lse};
    });
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    const TensorList& saved = ctx.saved();  // q, k, v, o, lse: head-sharded, or sequence-sharded (replay)
    const DType dtype = saved[0].dtype();
    const kernels::cpu::AttentionShape s =
        sequence_side_saved_ ? shape_of(saved[0], saved[1]) : shape_of_sharded(saved[0], saved[1]);
    const int P = sp_.size();
    WF_CHECK(grad[0].dtype() == dtype && grad[1].dtype() == dtype,
             "ulysses attention backward: the gradients of o and lse must be {}, got {} and {}", dtype_name(dtype),
             dtype_name(grad[0].dtype()), dtype_name(grad[1].dtype()));
    return dispatch_float(dtype, "ulysses attention", [&](auto tag) {
      using T = decltype(tag);
      Tensor doh = Tensor::empty({s.batch, s.q_len, s.heads, s.head_dim}, dtype);
      Tensor dlseh = Tensor::empty({s.batch, s.heads, s.q_len}, dtype);
      std::vector<Field> from{tokens_major(grad[0]), heads_major(grad[1])}, to{tokens_major(doh), heads_major(dlseh)};
      std::optional<detail::HeadSide> h;
      if (sequence_side_saved_) {  // the replay's inputs and result travel with dO
        h.emplace(head_side(s, dtype));
        detail::add_replayed_fields(saved, *h, from, to);
      }
      ulysses_exchange(sp_, positions_, Side::sequence, from, to);
      const Tensor &qh = h ? h->q : saved[0], &kh = h ? h->k : saved[1], &vh = h ? h->v : saved[2],
                   &oh = h ? h->o : saved[3], &lseh = h ? h->lse : saved[4];
      Tensor dqh = Tensor::empty(qh.shape(), dtype), dkh = Tensor::empty(kh.shape(), dtype),
             dvh = Tensor::empty(kh.shape(), dtype);
      kernels::cpu::attention_backward<T>(s, qh.data<T>(), kh.data<T>(), vh.data<T>(), oh.data<T>(), lseh.data<T>(),
                                          doh.data<T>(), dqh.data<T>(), dkh.data<T>(), dvh.data<T>(),
                                          /*accumulate=*/false, dlseh.data<T>());
      const std::int64_t n = s.q_len / P;
      Tensor dq = Tensor::empty({s.batch, n, s.heads * P, s.head_dim}, dtype);
      Tensor dk = Tensor::empty({s.batch, n, kv_heads_, s.head_dim}, dtype);
      Tensor dv = Tensor::empty(dk.shape(), dtype);
      ulysses_exchange(sp_, positions_, Side::heads, {tokens_major(dqh), tokens_major(dkh), tokens_major(dvh)},
                  {tokens_major(dq), tokens_major(dk), tokens_major(dv)});
      work_->backward = work(s);
      return TensorList{dq, dk, dv};
    });
  }

  std::string name() const override { return "UlyssesAttention"; }

 private:
  // The local attention's shape from the sequence-sharded q, k.
  kernels::cpu::AttentionShape shape_of(const Tensor& q, const Tensor& k) const {
    const int P = sp_.size();
    kernels::cpu::AttentionShape s;
    s.batch = q.size(0);
    s.q_len = s.kv_len = q.size(1) * P;
    s.heads = q.size(2) / P;
    s.kv_heads = ulysses_kv_heads_per_rank(k.size(2), P);
    s.head_dim = q.size(3);
    s.causal = causal_;
    s.scale = scale_;
    return s;
  }
  // The same from the head-sharded ones.
  kernels::cpu::AttentionShape shape_of_sharded(const Tensor& qh, const Tensor& kh) const {
    kernels::cpu::AttentionShape s;
    s.batch = qh.size(0);
    s.q_len = s.kv_len = qh.size(1);
    s.heads = qh.size(2);
    s.kv_heads = kh.size(2);
    s.head_dim = qh.size(3);
    s.causal = causal_;
    s.scale = scale_;
    return s;
  }
  // One kernel call over the whole sequence.
  static BlockAttentionStats work(const kernels::cpu::AttentionShape& s) {
    const std::int64_t N = s.q_len;
    return {1, 0, s.causal ? N * (N + 1) / 2 : N * N};
  }

  comm::Group& sp_;
  Positions positions_;
  std::int64_t kv_heads_;  // h_kv of the sequence side (the head side may hold copies of fewer)
  bool causal_;
  double scale_;
  std::shared_ptr<detail::WorkRecord> work_;
  detail::Replayed replayed_;
  bool sequence_side_saved_;  // a replay: the backward brings q, k, v, o, lse to the head side
};

class UlyssesAttention final : public detail::SpStrategyBase {
 public:
  UlyssesAttention(const SpAttentionConfig& config, comm::Group& sp) : SpStrategyBase("ulysses", config, sp) {
    for (const auto& runs : runs_) positions_.push_back(run_positions(runs));
  }

 private:
  AttentionResult run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                      detail::Replayed replayed) override {
    const std::string problem = ulysses_heads_problem(q.size(2), k.size(2), P_);
    WF_CHECK(problem.empty(), "ulysses attention: {}", problem);
    const TensorList out = autograd::apply_function(
        std::make_shared<UlyssesAttentionFunction>(sp_, positions_, k.size(2), options.causal, options.scale, work_,
                                                   std::move(replayed)),
        {q, k, v});
    return {out[0], out[1]};
  }

  Positions positions_;
};

// "1, 2, 4"; "none" when empty.
std::string listed(const std::vector<std::int64_t>& values) {
  return values.empty() ? std::string("none") : fmt::format("{}", fmt::join(values, ", "));
}

}  // namespace

std::string ulysses_heads_problem(std::int64_t h, std::int64_t h_kv, int P) {
  const auto works = [](std::int64_t heads, std::int64_t kv_heads, std::int64_t sp) {
    return sp >= 1 && kv_heads >= 1 && heads % kv_heads == 0 && heads % sp == 0 &&
           (kv_heads % sp == 0 || sp % kv_heads == 0);
  };
  if (h >= 1 && works(h, h_kv, P)) return "";
  // Every valid P and h_kv divides h, so the divisors of h are the candidates for both.
  std::vector<std::int64_t> sp_sizes, kv_head_counts;
  for (std::int64_t x = 1; x <= h; ++x) {
    if (h % x != 0) continue;
    if (works(h, h_kv, x)) sp_sizes.push_back(x);
    if (works(h, x, P)) kv_head_counts.push_back(x);
  }
  return fmt::format(
      "h = {} query heads and h_kv = {} kv heads do not split over the sp size P = {}: Ulysses needs h a multiple "
      "of P (each rank attends with h/P query heads) and h_kv a multiple of P or a divisor of P (then each kv head "
      "is replicated on the P/h_kv ranks whose query heads read it), h_kv dividing h. With these heads P can be "
      "{}; with h = {} at P = {}, h_kv can be {}. Otherwise use ring or wallfacer attention",
      h, h_kv, P, listed(sp_sizes), h, P, listed(kv_head_counts));
}

std::int64_t ulysses_kv_heads_per_rank(std::int64_t h_kv, int P) { return h_kv >= P ? h_kv / P : 1; }

std::shared_ptr<nn::AttentionStrategy> make_ulysses_attention(const SpAttentionConfig& config, comm::Group& sp) {
  return std::make_shared<UlyssesAttention>(config, sp);
}

}  // namespace wf::parallel

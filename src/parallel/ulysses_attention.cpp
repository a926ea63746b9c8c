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
// (P−1)/P·((2E + 2E_kv·ρ)·a + R·s), a and s the bytes of an activation and a statistic,
// ρ = max(1, P/h_kv) copies of each kv head, R = B·(N/P)·h: the R term is lse (forward) and
// its gradient (backward), which must travel because the nn::AttentionStrategy contract returns
// lse on the sequence shard. It rides in the O (dO) message, so the message count is that of
// two all-to-alls per pass.
//
// Dtypes: Q, K, V, O and their gradients travel in the activation dtype (bf16 under bf16 mixed
// precision), lse and d_lse in the compute dtype (ulysses_exchange.h). On the head side the
// kernel multiplies bf16 natively where the device can (multiply_dtype_of; q, k, v are widened while
// unpacking elsewhere), and o, lse, dQ, dK, dV are computed in f32; O and the gradients are
// rounded once, while packing. A replicated kv head's dK, dV are summed over its sharers in f32.
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
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "src/ops/common.h"
#include "src/ops/document_attention.h"
#include "src/parallel/sp_strategy_base.h"
#include "src/parallel/ulysses_exchange.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/block_attention.h"
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

// The head-sharded side of one call on `device`: every token, h/P query heads and their kv
// heads; q, k, v in the dtype the kernel multiplies in (bf16 where the device multiplies bf16
// natively, else widened while unpacking), o and lse in the compute dtype.
detail::HeadSide head_side(const kernels::AttentionShape& s, DType activation, Device device) {
  return {s.batch, s.q_len, s.heads, s.kv_heads, s.head_dim, detail::multiply_dtype_of(activation, device),
          detail::compute_dtype_of(activation), device};
}

// The local call's shape, with the documents' key windows when packed (the gathered tokens are
// the whole sequence in position order).
struct PackedCall {
  std::optional<ops::KeyWindows> windows;
  kernels::AttentionShape shape;
};
PackedCall packed(const kernels::AttentionShape& s, const DocumentBounds& documents) {
  PackedCall call{std::nullopt, s};
  if (documents.empty()) return call;
  call.windows.emplace(ops::position_range(s.q_offset, s.q_len), ops::position_range(s.kv_offset, s.kv_len), documents,
                       s.causal);
  call.shape = call.windows->applied_to(s);
  return call;
}

// The local attention over the whole sequence: h.o, h.lse from h.q, h.k, h.v (operands in
// h.q's dtype: bf16 with f32 results, or the compute dtype). With packed documents the kernel
// takes them inside the call (document_attention.h): the gathered tokens are in position order.
void attention_forward(const kernels::AttentionShape& s, const DocumentBounds& documents, detail::HeadSide& h) {
  if (detail::SkipBlockCompute::active()) {  // bench attention's communication-only time
    h.o.zero_();
    h.lse.fill_(-std::numeric_limits<double>::infinity());
    return;
  }
  const ops::Kernels k = ops::kernels_for("ulysses attention", {h.q, h.k, h.v, h.o, h.lse});
  const PackedCall call = packed(s, documents);
  k->attention_forward(k.stream, h.q.dtype(), call.shape, h.q.raw_data(), h.k.raw_data(), h.v.raw_data(),
                       h.o.raw_data(), h.lse.raw_data());
}

// Its backward: dq, dk, dv (compute dtype) from the saved head side, dO (h.q's dtype) and d_lse.
void attention_backward(const kernels::AttentionShape& s, const DocumentBounds& documents, const detail::HeadSide& h,
                        const Tensor& d_o, const Tensor& d_lse, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (detail::SkipBlockCompute::active()) {
    for (Tensor* t : {&dq, &dk, &dv}) t->zero_();
    return;
  }
  const ops::Kernels k = ops::kernels_for("ulysses attention", {h.q, h.k, h.v, h.o, h.lse, d_o, d_lse, dq, dk, dv});
  const PackedCall call = packed(s, documents);
  k->attention_backward(k.stream, h.q.dtype(), call.shape, h.q.raw_data(), h.k.raw_data(), h.v.raw_data(),
                        h.o.raw_data(), h.lse.raw_data(), d_o.raw_data(), dq.raw_data(), dk.raw_data(), dv.raw_data(),
                        /*accumulate=*/false, d_lse.raw_data());
}

class UlyssesAttentionFunction final : public autograd::Function {
 public:
  UlyssesAttentionFunction(comm::Group& sp, Positions positions, std::int64_t kv_heads, const AttentionOptions& options,
                           std::shared_ptr<detail::WorkRecord> work, detail::Replayed replayed)
      : sp_(sp),
        positions_(std::move(positions)),
        kv_heads_(kv_heads),
        causal_(options.causal),
        scale_(options.scale),
        documents_(options.doc_bounds),
        work_(std::move(work)),
        replayed_(std::move(replayed)),
        sequence_side_saved_(replayed_.has_value()) {}

  // inputs: q, k, v (this rank's shard); outputs: o, lse. Saved: the head-sharded q, k, v (in
  // the multiply dtype), o, lse (compute dtype); in a replay the sequence-sharded ones (q, k, v
  // and the replayed o, lse).
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor &q = in[0], &k = in[1], &v = in[2];
    if (auto replay = detail::save_replay(ctx, in, replayed_)) return *replay;
    const kernels::AttentionShape s = shape_of(q, k);
    const DType act = q.dtype();
    detail::HeadSide h = head_side(s, act, q.device());
    const auto a = [act](const Tensor& t) { return detail::activation_field(t, act); };
    const auto st = [act](const Tensor& t) { return detail::statistics_field(t, act); };
    ulysses_exchange(sp_, positions_, Side::sequence, {a(q), a(k), a(v)}, {a(h.q), a(h.k), a(h.v)});
    attention_forward(s, documents_, h);
    Tensor o = Tensor::empty(q.shape(), act, q.device());
    Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, act, q.device());
    ulysses_exchange(sp_, positions_, Side::heads, {a(h.o), st(h.lse)}, {a(o), st(lse)});
    work_->forward = work(s);
    ctx.save_for_backward({h.q, h.k, h.v, h.o, h.lse});
    return TensorList{o, lse};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    const TensorList& saved = ctx.saved();  // q, k, v, o, lse: head-sharded, or sequence-sharded (replay)
    const DType act = grad[0].dtype();
    const kernels::AttentionShape s =
        sequence_side_saved_ ? shape_of(saved[0], saved[1]) : shape_of_sharded(saved[0], saved[1]);
    const int P = sp_.size();
    WF_CHECK(grad[1].dtype() == act,
             "ulysses attention backward: the gradients of o and lse must share a dtype, got {} and {}",
             dtype_name(act), dtype_name(grad[1].dtype()));
    const Device device = grad[0].device();
    const DType mul = detail::multiply_dtype_of(act, device), cdt = detail::compute_dtype_of(act);
    const auto a = [act](const Tensor& t) { return detail::activation_field(t, act); };
    const auto st = [act](const Tensor& t) { return detail::statistics_field(t, act); };
    Tensor doh = Tensor::empty({s.batch, s.q_len, s.heads, s.head_dim}, mul, device);
    Tensor dlseh = Tensor::empty({s.batch, s.heads, s.q_len}, cdt, device);
    std::vector<Field> from{a(grad[0]), st(grad[1])}, to{a(doh), st(dlseh)};
    std::optional<detail::HeadSide> h;
    if (sequence_side_saved_) {  // the replay's inputs and result travel with dO
      h.emplace(head_side(s, act, device));
      detail::add_replayed_fields(saved, *h, act, from, to);
    }
    ulysses_exchange(sp_, positions_, Side::sequence, from, to);
    const detail::HeadSide head = h ? *h : detail::HeadSide(saved[0], saved[1], saved[2], saved[3], saved[4]);
    Tensor dqh = Tensor::empty(head.q.shape(), cdt, device), dkh = Tensor::empty(head.k.shape(), cdt, device),
           dvh = Tensor::empty(head.k.shape(), cdt, device);
    attention_backward(s, documents_, head, doh, dlseh, dqh, dkh, dvh);
    // dQ, dK, dV travel in the activation dtype. A replicated kv head's gradient is summed over
    // its sharers in the compute dtype, then rounded once.
    const std::int64_t n = s.q_len / P;
    const bool replicated = kv_heads_ < P;
    Tensor dq = Tensor::empty({s.batch, n, s.heads * P, s.head_dim}, act, device);
    Tensor dk = Tensor::empty({s.batch, n, kv_heads_, s.head_dim}, replicated ? cdt : act, device);
    Tensor dv = Tensor::empty(dk.shape(), dk.dtype(), device);
    ulysses_exchange(sp_, positions_, Side::heads, {a(dqh), a(dkh), a(dvh)}, {a(dq), a(dk), a(dv)});
    work_->backward = work(s);
    return TensorList{dq, dk.to(act), dv.to(act)};
  }

  std::string name() const override { return "UlyssesAttention"; }

 private:
  // The local attention's shape from the sequence-sharded q, k.
  kernels::AttentionShape shape_of(const Tensor& q, const Tensor& k) const {
    const int P = sp_.size();
    kernels::AttentionShape s;
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
  kernels::AttentionShape shape_of_sharded(const Tensor& qh, const Tensor& kh) const {
    kernels::AttentionShape s;
    s.batch = qh.size(0);
    s.q_len = s.kv_len = qh.size(1);
    s.heads = qh.size(2);
    s.kv_heads = kh.size(2);
    s.head_dim = qh.size(3);
    s.causal = causal_;
    s.scale = scale_;
    return s;
  }
  // One kernel call over the whole sequence (with packed documents, its documents' pairs).
  BlockAttentionStats work(const kernels::AttentionShape& s) const {
    const std::int64_t N = s.q_len;
    if (!documents_.empty()) return {1, 0, ops::document_pairs(s, documents_)};
    return {1, 0, s.causal ? N * (N + 1) / 2 : N * N};
  }

  comm::Group& sp_;
  Positions positions_;
  std::int64_t kv_heads_;  // h_kv of the sequence side (the head side may hold copies of fewer)
  bool causal_;
  double scale_;
  DocumentBounds documents_;  // packed documents (AttentionOptions::doc_bounds)
  std::shared_ptr<detail::WorkRecord> work_;
  detail::Replayed replayed_;
  bool sequence_side_saved_;  // a replay: the backward brings q, k, v, o, lse to the head side
};

class UlyssesAttention final : public detail::SpStrategyBase {
 public:
  // Packed documents keep the token layout (SpShard::balance_documents): every rank attends over
  // the whole sequence for its heads, so its work is the same whatever tokens it holds.
  UlyssesAttention(const SpAttentionConfig& config, comm::Group& sp) : SpStrategyBase("ulysses", config, sp) {
    for (const auto& runs : runs_) positions_.push_back(run_positions(runs));
  }

 private:
  AttentionResult run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                      detail::Replayed replayed) override {
    const std::string problem = ulysses_heads_problem(q.size(2), k.size(2), P_);
    WF_CHECK(problem.empty(), "ulysses attention: {}", problem);
    const TensorList out = autograd::apply_function(
        std::make_shared<UlyssesAttentionFunction>(sp_, positions_, k.size(2), options, work_, std::move(replayed)),
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

// Ring attention: every rank keeps its queries and passes its K/V block around the sp group,
// P − 1 shifts to ring next, so its queries meet every rank's keys once. The traffic follows
// docs/sequence-layout.md §5 exactly (traffic_model.h's ring_attention_traffic):
//
//   forward   at steps 0 … P−2 send the held K, V (one packed message) to ring next while
//             computing against them; no send after the last step.
//   backward  K, V travel as in the forward. The dK, dV accumulator of the held block travels
//             with it (ring-flash-attention's convention): after computing a step, a rank adds its
//             share into the accumulator it received and sends it on; after the last step the
//             accumulator sits one rank behind its owner and a P-th send brings it home. Q, dO,
//             O and lse never move.
//
// Packed documents (document_ring_steps.h): the call runs only the steps at which some rank has
// a visible pair, the same on every rank; between two of them the K/V (and the accumulator) hop
// straight to the rank the next one needs, at ring distance the steps' gap, and from the last
// one the accumulator goes straight home (no message at all when only step 0 runs). With every
// step kept the hops are the ring's, message for message.
//
// Overlap: the next step's K/V is received into a second buffer (non-blocking isend/irecv)
// while the current block computes. In the backward each step's dK, dV share is computed into
// a fresh buffer, so the accumulator from ring prev can still be in flight; it is added after
// the compute (share + received, a fixed order: the result is deterministic), and the sum goes
// on to ring next while the following step computes.
//
// Replay (activation checkpointing at the attention output): the Function saves the replayed
// out and lse in place of the ones its forward would compute; no attention runs and nothing
// travels until the backward, which is the ordinary one.
//
// Dtypes: K and V travel in the activation dtype (bf16 under bf16 mixed precision); O, lse and the
// dK, dV accumulators are kept and sent in the compute dtype (f32, or f64 for f64), which is what
// ElementBytes::activation and ::partial count. The blocks multiply in multiply_dtype_of: bf16
// where the device does so natively, else widened per step.
#include "src/parallel/ring_attention.h"

#include <limits>
#include <utility>

#include "src/parallel/sp_strategy_base.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/parallel/document_ring_steps.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"

namespace wf::parallel {
namespace {

using autograd::Context;
using autograd::TensorList;
using detail::pair_half;

// The K/V ring and the dK/dV ring are both in flight between the same neighbours in the
// backward; separate tags keep their messages apart on MPI (NCCL has no tags: there they match
// because every rank issues them in the same order). Each ring step is one isendrecv, the
// exchange that cannot deadlock on a transport that runs a rank's operations in order, and the
// compute stream waits for it on the device (Request::make_wait): on a device's own transport
// the host never blocks inside the loop, and the next block's attention overlaps the transfer.
constexpr int kTagKv = 0x5201;
constexpr int kTagDkv = 0x5202;

class RingAttentionFunction final : public autograd::Function {
 public:
  RingAttentionFunction(comm::Group& sp, std::vector<std::vector<TokenRun>> runs, const AttentionOptions& options,
                        std::shared_ptr<detail::WorkRecord> work, detail::Replayed replayed)
      : sp_(sp),
        runs_(std::move(runs)),
        causal_(options.causal),
        scale_(options.scale),
        documents_(options.doc_bounds),
        steps_(ring_attention_steps(runs_, causal_, documents_)),
        work_(std::move(work)),
        replayed_(std::move(replayed)) {}

  // inputs: q, k, v (this rank's shard); outputs: o, lse (the replayed ones, if any)
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor &q = in[0], &k = in[1], &v = in[2];
    const Device device = q.device();
    const Stream compute = Stream::current(device);  // waits for each exchange; the host does not
    const DType act = q.dtype(), cdt = detail::compute_dtype_of(act), mul = detail::multiply_dtype_of(act, device);
    if (replayed_) {  // the backward needs exactly what the forward below saves
      const AttentionResult r = std::move(*replayed_);
      replayed_.reset();
      ctx.save_for_backward({q, k, v, r.out.to(cdt), r.lse.to(cdt)});
      return {r.out, r.lse};
    }
    const Tensor q_mul = q.to(mul);
    Tensor o = Tensor::zeros(q.shape(), cdt, device);
    Tensor lse =
        Tensor::full({q.size(0), q.size(2), q.size(1)}, -std::numeric_limits<double>::infinity(), cdt, device);
    BlockAttentionStats work;
    Tensor held = detail::pack_pair(k, v);
    Tensor incoming = Tensor::empty(held.shape(), held.dtype(), device);
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const bool shift = i + 1 < steps_.size();
      comm::Request exchange;
      if (shift) exchange = sp_.isendrecv(held, ahead(hop(i)), incoming, ahead(-hop(i)), kTagKv);
      work += block_attention_forward(q_mul, my_runs(), pair_half(held, 0).to(mul), pair_half(held, 1).to(mul),
                                      owner_runs(steps_[i]), causal_, scale_, o, lse, documents_);
      if (shift) {
        exchange.make_wait(compute);
        std::swap(held, incoming);
      }
    }
    work_->forward = work;
    ctx.save_for_backward({q, k, v, o, lse});
    return {o.to(act), lse.to(act)};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    const TensorList& s = ctx.saved();  // q, k, v, o, lse (o and lse in the compute dtype)
    const Device device = s[0].device();
    const Stream compute = Stream::current(device);
    const DType act = s[0].dtype(), cdt = detail::compute_dtype_of(act), mul = detail::multiply_dtype_of(act, device);
    const Tensor q = s[0].to(mul), &o = s[3], &lse = s[4];
    const Tensor d_o = (grad[0].defined() ? grad[0] : Tensor::zeros(s[0].shape(), act, device)).to(mul);
    // Passed whenever it arrives: the kernels' D − d_lse is D exactly where d_lse is 0, so no
    // host read has to decide whether it matters.
    const Tensor d_lse = grad[1].defined() ? grad[1].to(cdt) : Tensor();
    Tensor dq = Tensor::zeros(q.shape(), cdt, device);
    BlockAttentionStats work;

    Tensor held = detail::pack_pair(s[1], s[2]);
    Tensor incoming = Tensor::empty(held.shape(), held.dtype(), device);
    // share[step % 2]: this step's dK, dV share, then (plus what came from ring prev) the
    // accumulator sent on; two buffers because the previous one may still be being sent.
    Tensor share[2] = {Tensor::empty(held.shape(), cdt, device), Tensor::empty(held.shape(), cdt, device)};
    Tensor accumulated = Tensor::empty(held.shape(), cdt, device);  // from ring prev
    comm::Request accumulate;  // the dK, dV accumulator's exchange
    const bool travels = steps_.size() > 1;  // else every accumulator stays home
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const bool shift = i + 1 < steps_.size();
      comm::Request exchange;
      if (shift) exchange = sp_.isendrecv(held, ahead(hop(i)), incoming, ahead(-hop(i)), kTagKv);
      Tensor& mine = share[i % 2];
      mine.zero_();
      Tensor dk = pair_half(mine, 0), dv = pair_half(mine, 1);
      work += block_attention_backward(q, my_runs(), pair_half(held, 0).to(mul), pair_half(held, 1).to(mul),
                                       owner_runs(steps_[i]), causal_, scale_, o, lse, d_o, d_lse, dq, dk, dv,
                                       documents_);
      if (i > 0) {  // the accumulator of the block held now, from where that block was
        accumulate.make_wait(compute);
        detail::add_into(mine, accumulated);
      }
      if (travels) {  // on with the block; after the last step, home to its owner
        const int to = shift ? hop(i) : -steps_.back();
        accumulate = sp_.isendrecv(mine, ahead(to), accumulated, ahead(-to), kTagDkv);
      }
      if (shift) {
        exchange.make_wait(compute);
        std::swap(held, incoming);
      }
    }
    work_->backward = work;
    const Tensor& home = travels ? accumulated : share[0];
    if (travels) accumulate.make_wait(compute);
    // Fresh tensors in the inputs' dtype (the accumulators are reused views of one buffer).
    const auto owned = [act](const Tensor& t) { return t.dtype() == act ? t.clone() : t.to(act); };
    return {dq.to(act), owned(pair_half(home, 0)), owned(pair_half(home, 1))};
  }

  std::string name() const override { return "RingAttention"; }

 private:
  int P() const { return sp_.size(); }
  // The rank `distance` places on along the ring (back for a negative one).
  int ahead(int distance) const { return ((sp_.rank() + distance) % P() + P()) % P(); }
  // How far the block goes after steps_[i]: to the rank that holds it at steps_[i + 1].
  int hop(std::size_t i) const { return steps_[i + 1] - steps_[i]; }
  const std::vector<TokenRun>& my_runs() const { return runs_[static_cast<std::size_t>(sp_.rank())]; }
  // At step i a rank holds the K/V of ring rank (r − i) mod P.
  const std::vector<TokenRun>& owner_runs(int step) const {
    return runs_[static_cast<std::size_t>((sp_.rank() - step % P() + P()) % P())];
  }

  comm::Group& sp_;
  std::vector<std::vector<TokenRun>> runs_;
  bool causal_;
  double scale_;
  DocumentBounds documents_;  // packed documents (AttentionOptions::doc_bounds)
  std::vector<int> steps_;    // the ring steps this call runs: every one, unless documents_ skip some
  std::shared_ptr<detail::WorkRecord> work_;
  detail::Replayed replayed_;
};

class RingAttention final : public detail::SpStrategyBase {
 public:
  RingAttention(const SpAttentionConfig& config, comm::Group& sp) : SpStrategyBase("ring", config, sp) {}

 private:
  AttentionResult run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                      detail::Replayed replayed) override {
    const TensorList out = autograd::apply_function(
        std::make_shared<RingAttentionFunction>(sp_, runs_for(options), options, work_, std::move(replayed)),
        {q, k, v});
    return {out[0], out[1]};
  }
};

}  // namespace

std::shared_ptr<nn::AttentionStrategy> make_ring_attention(const SpAttentionConfig& config, comm::Group& sp) {
  return std::make_shared<RingAttention>(config, sp);
}

}  // namespace wf::parallel

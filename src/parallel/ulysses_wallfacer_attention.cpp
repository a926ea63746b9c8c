// The ulysses-wallfacer hybrid: USP's Ulysses × ring with WallFacer as the ring. Each rank holds
// n = N/P tokens and all h heads; one Ulysses all-to-all over "sp.ulysses" (U ranks) turns that
// into the U·n tokens of its WallFacer member's shard, in the shard's storage order, × h/U query
// heads (and the kv heads they read: ulysses_heads.h for U); WallFacer attention runs on those
// over "sp.wallfacer" (W = P/U ranks, teams of C, "sp.team" and "sp.ring" inside it); a second
// all-to-all brings O and lse back. The backward mirrors it: dO and d_lse in, WallFacer's
// backward, dQ, dK, dV out (a replicated kv head's gradient summed over its sharers).
//
// The pieces are the strategies' own: the exchange is Ulysses' (ulysses_exchange.h) with each
// rank's tokens addressed by their index in the member's storage, and WallFacer's autograd
// Function is driven by hand inside this one (forward and backward with a Context of ours), so
// that a replay can carry the replayed tensors across in the backward's all-to-all.
//
// Which tokens a rank holds (sequence_layout.h, U > 1): the WallFacer layout over W shards,
// each shard's storage split over its U Ulysses ranks by the C = 1 layout of the same kind.
//
// Traffic (per rank): traffic_model.h's ulysses_wallfacer_traffic, the Ulysses formula over U
// ranks for N/W tokens plus the WallFacer formula over W ranks for h/U heads.
//
// Replay (activation checkpointing at the attention output): like Ulysses, nothing moves in the
// replay; the Function saves the sequence-sharded q, k, v, out, lse, and its backward sends them
// to the head side in the dO all-to-all, then runs WallFacer's replayed backward (K/V
// re-dispatched).
//
// Dtypes: the all-to-alls move Q, K, V, O and their gradients in the activation dtype and lse,
// d_lse in the compute dtype, as Ulysses does (ulysses_exchange.h); WallFacer takes the bf16
// shards as they are (it moves bf16 itself). A replicated kv head's dK, dV are summed over its
// sharers in f32.
#include "src/parallel/ulysses_wallfacer_attention.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/parallel/sp_strategy_base.h"
#include "src/parallel/ulysses_attention.h"
#include "src/parallel/ulysses_exchange.h"
#include "src/parallel/wallfacer_attention.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/ulysses_heads.h"

namespace wf::parallel {
namespace {

using autograd::Context;
using autograd::TensorList;
using detail::Field;
using detail::HeadSide;
using detail::heads_major;
using detail::Positions;
using detail::Side;
using detail::tokens_major;
using detail::ulysses_exchange;

constexpr const char* kWhat = "ulysses-wallfacer attention";

class UlyssesWallFacerFunction final : public autograd::Function {
 public:
  UlyssesWallFacerFunction(comm::Group& ulysses, std::shared_ptr<const Positions> positions,
                           std::shared_ptr<const detail::WallFacerRank> rank, detail::WallFacerCall call,
                           std::int64_t kv_heads, std::shared_ptr<detail::WorkRecord> work, detail::Replayed replayed)
      : ulysses_(ulysses),
        positions_(std::move(positions)),
        rank_(std::move(rank)),
        call_(call),
        kv_heads_(kv_heads),
        work_(std::move(work)),
        replayed_(std::move(replayed)),
        sequence_side_saved_(replayed_.has_value()) {}

  // inputs: q, k, v (this rank's shard); outputs: o, lse. Saved: what WallFacer's forward saved
  // on the head side; in a replay the sequence-sharded q, k, v and the replayed o, lse.
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor &q = in[0], &k = in[1], &v = in[2];
    if (auto replay = detail::save_replay(ctx, in, replayed_)) return *replay;
    const DType act = q.dtype();
    const auto a = [act](const Tensor& t) { return detail::activation_field(t, act); };
    const auto st = [act](const Tensor& t) { return detail::statistics_field(t, act); };
    HeadSide h = head_side(q.size(0), q.size(1), q.size(2), q.size(3), act, /*replayed=*/false, q.device());
    ulysses_exchange(ulysses_, *positions_, Side::sequence, {a(q), a(k), a(v)}, {a(h.q), a(h.k), a(h.v)});
    wallfacer_ = detail::make_wallfacer_function(rank_, call_, work_, std::nullopt);
    Context inner = inner_context();
    const TensorList oh = wallfacer_->forward(inner, {h.q, h.k, h.v});
    Tensor o = Tensor::empty(q.shape(), act, q.device());
    Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, act, q.device());
    ulysses_exchange(ulysses_, *positions_, Side::heads, {a(oh[0]), st(oh[1])}, {a(o), st(lse)});
    ctx.save_for_backward(inner.saved());
    return {o, lse};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    const TensorList& saved = ctx.saved();
    const Tensor& d_out = grad[0];
    const DType act = d_out.dtype(), cdt = detail::compute_dtype_of(act);
    const Device device = d_out.device();
    WF_CHECK(grad[1].dtype() == act, "{} backward: the gradients of o and lse must share a dtype, got {} and {}",
             kWhat, dtype_name(act), dtype_name(grad[1].dtype()));
    const auto a = [act](const Tensor& t) { return detail::activation_field(t, act); };
    const auto st = [act](const Tensor& t) { return detail::statistics_field(t, act); };
    const std::int64_t B = d_out.size(0), n = d_out.size(1), heads = d_out.size(2), d = d_out.size(3);
    const int U = ulysses_.size();
    Tensor doh = Tensor::empty({B, n * U, heads / U, d}, act, device);
    Tensor dlseh = Tensor::empty({B, heads / U, n * U}, cdt, device);
    std::vector<Field> from{a(d_out), st(grad[1])}, to{a(doh), st(dlseh)};
    std::optional<HeadSide> h;
    if (sequence_side_saved_) {  // the replay's q, k, v, o, lse travel with dO
      h.emplace(head_side(B, n, heads, d, act, /*replayed=*/true, device));
      detail::add_replayed_fields(saved, *h, act, from, to);
    }
    ulysses_exchange(ulysses_, *positions_, Side::sequence, from, to);

    Context inner = inner_context();
    std::shared_ptr<autograd::Function> wallfacer = wallfacer_;
    if (h) {  // WallFacer's replay: it saves, moves nothing
      wallfacer = detail::make_wallfacer_function(rank_, call_, work_, AttentionResult{h->o, h->lse});
      (void)wallfacer->forward(inner, {h->q, h->k, h->v});
    } else {
      inner.save_for_backward(saved);
    }
    const TensorList gh = wallfacer->backward(inner, {doh, dlseh});

    // A replicated kv head's gradient is summed over its sharers in the compute dtype, then
    // rounded once.
    const bool replicated = kv_heads_ < U;
    Tensor dq = Tensor::empty(d_out.shape(), act, device);
    Tensor dk = Tensor::empty({B, n, kv_heads_, d}, replicated ? cdt : act, device);
    Tensor dv = Tensor::empty(dk.shape(), dk.dtype(), device);
    ulysses_exchange(ulysses_, *positions_, Side::heads, {a(gh[0]), a(gh[1]), a(gh[2])}, {a(dq), a(dk), a(dv)});
    return {dq, dk.to(act), dv.to(act)};
  }

  std::string name() const override { return "UlyssesWallFacerAttention"; }

 private:
  // The member's U·n tokens, h/U query heads and their kv heads, from the sequence side's q
  // [B, n, heads, d]: q, k, v in the activation dtype (WallFacer takes them so); with
  // `replayed`, o and lse too (a replay's, for WallFacer's replayed backward) in the compute
  // dtype. The forward needs no o, lse of its own: WallFacer returns them. On `device`.
  HeadSide head_side(std::int64_t B, std::int64_t n, std::int64_t heads, std::int64_t d, DType activation,
                     bool replayed, Device device) const {
    const int U = ulysses_.size();
    return HeadSide(B, n * U, heads / U, ulysses_kv_heads_per_rank(kv_heads_, U), d, activation,
                    replayed ? std::optional<DType>(detail::compute_dtype_of(activation)) : std::nullopt, device);
  }
  static Context inner_context() {
    Context inner;
    inner.set_needs_input_grad({true, true, true});
    return inner;
  }

  comm::Group& ulysses_;
  std::shared_ptr<const Positions> positions_;  // shared with the strategy
  std::shared_ptr<const detail::WallFacerRank> rank_;
  detail::WallFacerCall call_;
  std::int64_t kv_heads_;  // h_kv of the sequence side
  std::shared_ptr<detail::WorkRecord> work_;
  detail::Replayed replayed_;
  bool sequence_side_saved_;
  std::shared_ptr<autograd::Function> wallfacer_;  // the forward's, whose saved tensors ctx holds
};

std::vector<int> logical_indices(const comm::ProcessGrid& grid) {
  std::vector<int> out;
  for (int s = 0; s < grid.config().sp; ++s) out.push_back(grid.sp_logical_index(s));
  return out;
}

class UlyssesWallFacerAttention final : public detail::SpStrategyBase {
 public:
  UlyssesWallFacerAttention(const SpAttentionConfig& config, comm::CommGrid& grid)
      : SpStrategyBase("ulysses-wallfacer", config, grid.group("sp"), grid.grid().config().C,
                       grid.grid().config().U, logical_indices(grid.grid())),
        ulysses_(grid.group("sp.ulysses")),
        wallfacer_(detail::locate_wallfacer(config, grid, "sp.wallfacer")),
        grid_C_(grid.grid().config().C),
        keep_forward_kv_(config.keep_forward_kv) {
    const int U = ulysses_.size(), W = P_ / U;
    WF_CHECK(U == grid.grid().config().U, "{}: the grid's sp.ulysses group has {} ranks but U = {}", kWhat, U,
             grid.grid().config().U);
    // Where each Ulysses rank's tokens sit in the member's shard (its storage order).
    auto positions = std::make_shared<Positions>();
    for (int u = 0; u < U; ++u) {
      positions->push_back(run_positions(rank_tokens(config.layout, config.seq_len / W, U, 1, u)));
    }
    positions_ = std::move(positions);
  }

 private:
  AttentionResult run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                      detail::Replayed replayed) override {
    const std::string problem = ulysses_heads_problem(q.size(2), k.size(2), ulysses_.size());
    WF_CHECK(problem.empty(), "{} (Ulysses degree U = {}, the 'P' below): {}", kWhat, ulysses_.size(), problem);
    const detail::WallFacerCall call{options.causal, options.scale, keep_forward_kv_, options.doc_bounds};
    // Packed documents rearrange the WallFacer shards' chunks; each shard's Ulysses split (positions_,
    // storage indices) stays.
    const std::shared_ptr<const detail::WallFacerRank> laid_out =
        documents_.rank_for(wallfacer_, options.doc_bounds, P_, grid_C_, ulysses_.size());
    const TensorList out = autograd::apply_function(
        std::make_shared<UlyssesWallFacerFunction>(ulysses_, positions_, laid_out, call, k.size(2), work_,
                                                   std::move(replayed)),
        {q, k, v});
    return {out[0], out[1]};
  }

  comm::Group& ulysses_;
  std::shared_ptr<const detail::WallFacerRank> wallfacer_;
  detail::WallFacerDocuments documents_;  // wallfacer_ laid out for the last packed documents
  int grid_C_;
  bool keep_forward_kv_;
  std::shared_ptr<const Positions> positions_;
};

}  // namespace

std::shared_ptr<nn::AttentionStrategy> make_ulysses_wallfacer_attention(const SpAttentionConfig& config,
                                                                        comm::CommGrid& grid) {
  const int U = grid.grid().config().U;
  if (U == 1) return make_wallfacer_attention(config, grid);          // no all-to-all over one rank
  if (U == grid.grid().config().sp) return make_ulysses_attention(config, grid.group("sp"));  // WallFacer over one rank
  return std::make_shared<UlyssesWallFacerAttention>(config, grid);
}

}  // namespace wf::parallel

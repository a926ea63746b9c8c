// WallFacer multi-ring attention: the schedule of shared/design/wallfacer-algorithm.md with the
// traffic conventions of docs/sequence-layout.md §5. All attention arithmetic is
// block_attention's; this file only moves tensors and combines the members' partial results.
//
// Forward, per rank (team t, member m, sub-ring position j):
//   1. all-gather q, k, v in the team → the team's C·n tokens (storage = team_tokens(t));
//   2. dispatch the team's K, V to initial_send, receive from initial_recv (self: no message);
//   3. G ring steps: attention of the team's queries against the K, V held now, merged into
//      (o, lse); meanwhile the K, V go to ring next (double buffer; no send after the last step);
//   4. all-gather the members' partial lse, combine them into lse* in member order (identical on
//      every member), rescale o by exp(lse_m − lse*), reduce-scatter o to the members' rows.
// Backward: all-gather dO and the members' D; get back the step-0 K/V (kept or re-dispatched);
// G steps in which the query bundle (Q, dO, lse*, −D, dQ) travels the sub-ring while K, V stay
// and dK, dV accumulate in place; dQ goes home, dK, dV go back along the inverse dispatch; a
// reduce-scatter in the team leaves each member its own rows of dQ, dK, dV.
// Packed documents (document_ring_steps.h's wallfacer_steps, one list per pass, the same on
// every rank): the sub-ring runs only the steps at which some rank has a visible pair; the K/V
// (forward) or the bundle with its dQ (backward) hop straight to the rank the next kept step
// needs, and dQ goes home from the last one. The team collectives, the dispatch and dK, dV's
// way back do not depend on the documents and are unchanged.
// Replay (activation checkpointing at the attention output): no attention and no message. The
// Function saves this member's q, k, v and the replayed out and lse; the backward all-gathers
// q with dO and lse with D (the same two collectives, larger), and re-dispatches K/V as with
// keep_forward_kv = false, so nothing team-sized is held between the replay and its backward.
//
// Dtypes: Q, K, V, O and dO travel in the activation dtype (the inputs'); lse, D and the
// partial sums (o before the reduce-scatter, every dQ, dK, dV) in the compute dtype — f64 for
// f64 inputs, f32 otherwise — which is what ElementBytes::stats / ::partial count. bf16 blocks
// multiply in bf16 where the device does so natively (multiply_dtype_of).
//
// Every tensor lives on the inputs' device: the combine, D and the copies between member and
// team layouts are that device's kernels (kernels/backend.h), never a loop here.
#include "src/parallel/wallfacer_attention.h"

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "src/ops/common.h"
#include "src/ops/document_attention.h"
#include "src/parallel/sp_strategy_base.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/document_ring_steps.h"

namespace wf::parallel {
namespace {

using autograd::Context;
using autograd::TensorList;

constexpr const char* kWhat = "wallfacer attention";

// One tag per kind of message; a tensor list uses consecutive tags from its kind's base.
enum Tag : int {
  kDispatchTag = 7100,   // team K, V to the initial send target (forward and re-dispatch)
  kRingKvTag = 7110,     // forward: K, V to ring next
  kBundleTag = 7120,     // backward: Q, dO, lse*, −D to ring next
  kBundleDqTag = 7130,   // backward: the bundle's dQ accumulator to ring next
  kDqHomeTag = 7140,     // backward: the finished dQ to its home (ring next)
  kDkvOriginTag = 7150,  // backward: dK, dV back to the K/V's origin (initial_recv)
};

using detail::compute_dtype_of;
// Widened once, before the ring, where the device has no bf16 products: cheaper than the
// kernels' fallback widening every tile.
using detail::multiply_dtype_of;

std::vector<Tensor> empty_like(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(Tensor::empty(t.shape(), t.dtype(), t.device()));
  return out;
}

// For o < outer: `count` elements from src[o·src_block + src_at] to dst[o·dst_block + dst_at]
// (elements of their one dtype, on their one device).
void copy_strided(const Tensor& src, std::int64_t src_block, std::int64_t src_at, Tensor& dst, std::int64_t dst_block,
                  std::int64_t dst_at, std::int64_t outer, std::int64_t count) {
  const ops::Kernels k = ops::kernels_for(kWhat, {src, dst});
  k->copy_blocks(k.stream, dtype_size(src.dtype()), src.raw_data(), src_block, src_at, dst.raw_data(), dst_block,
                 dst_at, outer, count);
}

}  // namespace

// ---- where this rank sits ----------------------------------------------------------------

namespace detail {

// This rank's groups, peers (as ranks of the group each message uses) and the token runs of
// every block it computes. Fixed for the strategy's lifetime.
struct WallFacerRank {
  const comm::WallFacerLayout* wallfacer = nullptr;  // the grid's (it outlives the strategy)
  comm::Group* sp = nullptr;    // dispatch and its inverse, by WallFacer index (the sp group, or sp.wallfacer)
  comm::Group* team = nullptr;  // all-gathers and reduce-scatters, by member
  comm::Group* ring = nullptr;  // ring shifts, by sub-ring position
  SequenceLayout layout = SequenceLayout::zigzag;
  std::int64_t seq_len = 0;
  int P = 1, C = 1, G = 1, member = 0;
  int dispatch_to = 0, dispatch_from = 0;          // sp ranks: initial_send / initial_recv
  int ring_next = 0, ring_prev = 0;                // sp.ring ranks
  std::vector<TokenRun> team_runs;                 // the team's queries (this rank's query storage)
  std::vector<std::vector<TokenRun>> kv_runs;      // forward step i: the K/V held
  std::vector<std::vector<TokenRun>> bundle_runs;  // backward step i: the visiting queries
  std::vector<std::vector<TokenRun>> teams;        // every team's tokens: the ring steps look at every rank
  int query_team = 0;                              // whose tokens the runs above are: team_runs'
  std::vector<int> kv_teams, bundle_teams;         // kv_runs' and bundle_runs'
  std::shared_ptr<const ChunkAssignment> chunks;   // the layout the runs follow (null: the zigzag)

  std::int64_t local_tokens() const { return seq_len / P; }
  // The sub-ring rank `distance` positions on (back for a negative one).
  int ring_ahead(int distance) const { return ((ring->rank() + distance) % G + G) % G; }
};

std::shared_ptr<const WallFacerRank> locate_wallfacer(const SpAttentionConfig& config, comm::CommGrid& grid,
                                                     const char* dispatch_group) {
  const comm::ProcessGrid& pg = grid.grid();
  const comm::WallFacerLayout& wl = pg.wallfacer();
  auto located = std::make_shared<WallFacerRank>();
  WallFacerRank& r = *located;
  r.wallfacer = &wl;
  r.sp = &grid.group(dispatch_group);
  r.team = &grid.group("sp.team");
  r.ring = &grid.group("sp.ring");
  r.layout = config.layout;
  r.seq_len = config.seq_len;
  r.P = wl.ranks();
  r.C = wl.team_size();
  r.G = wl.ring_size();
  check_sequence_length(r.layout, r.seq_len, r.P, r.C);

  const int me = r.sp->rank();  // the physical WallFacer index (the sp index when U = 1)
  const comm::SpPosition pos = wl.position(me);
  r.member = pos.member;
  r.dispatch_to = wl.initial_send(me);
  r.dispatch_from = wl.initial_recv(me);
  r.ring_next = (pos.ring_pos + 1) % r.G;
  r.ring_prev = (pos.ring_pos + r.G - 1) % r.G;

  // The groups must be the ones the layout describes: team ranks by member, ring ranks by
  // position, so that the peers above address the right processes.
  const comm::WallFacerPeers peers = pg.wallfacer_peers();
  WF_CHECK(r.sp->size() == r.P && r.team->size() == r.C && r.ring->size() == r.G && r.team->rank() == r.member &&
               r.ring->rank() == pos.ring_pos && r.sp->world_ranks()[r.dispatch_to] == peers.initial_send &&
               r.sp->world_ranks()[r.dispatch_from] == peers.initial_recv &&
               r.ring->world_ranks()[r.ring_next] == peers.ring_next &&
               r.ring->world_ranks()[r.ring_prev] == peers.ring_prev,
           "{}: the grid's sp groups ({} {} ranks, sp.team {}, sp.ring {}) do not match its WallFacer layout "
           "(P = {}, C = {}, G = {})",
           kWhat, dispatch_group, r.sp->size(), r.team->size(), r.ring->size(), r.P, r.C, r.G);

  r.query_team = wl.team(me);
  for (int i = 0; i < r.G; ++i) {
    r.kv_teams.push_back(wl.kv_team_at_step(me, i));
    // The bundle held at step i started i positions back on the sub-ring, in this team group.
    r.bundle_teams.push_back(pos.team_group * r.G + (pos.ring_pos - i + r.G) % r.G);
  }
  lay_out_runs(r);
  return located;
}

void lay_out_runs(WallFacerRank& r) {
  const auto runs = [&r](int team) { return team_tokens(r.layout, r.seq_len, r.P, r.C, team, r.chunks.get()); };
  r.team_runs = runs(r.query_team);
  r.kv_runs.clear();
  r.bundle_runs.clear();
  r.teams.clear();
  for (int t = 0; t < r.P / r.C; ++t) r.teams.push_back(runs(t));
  for (int i = 0; i < r.G; ++i) {
    r.kv_runs.push_back(runs(r.kv_teams[static_cast<std::size_t>(i)]));
    r.bundle_runs.push_back(runs(r.bundle_teams[static_cast<std::size_t>(i)]));
  }
}

std::shared_ptr<const WallFacerRank> WallFacerDocuments::rank_for(const std::shared_ptr<const WallFacerRank>& base,
                                                                  const DocumentBounds& documents, int P, int C,
                                                                  int U) {
  bool changed = false;
  std::shared_ptr<const ChunkAssignment> chunks =
      chunks_.get(base->layout, documents, base->seq_len, P, C, U, &changed);
  if (chunks == nullptr) return base;
  if (changed || rank_ == nullptr) {
    auto laid_out = std::make_shared<WallFacerRank>(*base);
    laid_out->chunks = std::move(chunks);
    lay_out_runs(*laid_out);
    rank_ = std::move(laid_out);
  }
  return rank_;
}

}  // namespace detail

namespace {

using detail::WallFacerRank;

// ---- team collectives over the sequence dim ------------------------------------------------
// A member's shard [outer, n, inner] (sequence along `seq_dim`) is slice m of the team tensor
// [outer, C·n, inner]: member order is team_tokens order. Collectives concatenate and split
// along dim 0 instead, i.e. member-major [C, outer, n, inner]; these helpers convert, and pack
// several tensors into one collective.

struct SeqBlocks {
  std::int64_t outer = 1;   // product of the dims before the sequence dim
  std::int64_t member = 0;  // one member's n·inner elements for one outer index
};

SeqBlocks seq_blocks(const Shape& local_shape, std::size_t seq_dim) {
  SeqBlocks s;
  std::int64_t inner = 1;
  for (std::size_t i = 0; i < local_shape.size(); ++i) {
    if (i < seq_dim)
      s.outer *= local_shape[i];
    else
      inner *= local_shape[i];
  }
  s.member = inner;
  return s;
}

// Member c's piece [outer, n, inner] (from element `piece_at` of `piece`) into its slice of a
// team tensor, and back out.
void member_slice_to_team(const Tensor& piece, std::int64_t piece_at, Tensor& team, const SeqBlocks& s, int C, int c) {
  copy_strided(piece, s.member, piece_at, team, C * s.member, c * s.member, s.outer, s.member);
}
void team_to_member_slice(const Tensor& team, Tensor& piece, std::int64_t piece_at, const SeqBlocks& s, int C, int c) {
  copy_strided(team, C * s.member, c * s.member, piece, s.member, piece_at, s.outer, s.member);
}

void check_one_dtype(const std::vector<Tensor>& tensors, const char* what) {
  for (const Tensor& t : tensors) {
    WF_CHECK(t.dtype() == tensors.front().dtype(), "{}: {} packs tensors of one dtype, got {} and {}", kWhat, what,
             dtype_name(tensors.front().dtype()), dtype_name(t.dtype()));
  }
}

// All-gathers the members' shards in one collective; returns each as the team tensor.
std::vector<Tensor> gather_team(comm::Group& team, const std::vector<Tensor>& locals, std::size_t seq_dim) {
  const int C = team.size();
  if (C == 1) return locals;
  check_one_dtype(locals, "the team all-gather");
  const DType dtype = locals.front().dtype();
  std::int64_t total = 0;
  for (const Tensor& t : locals) total += t.numel();
  const Device device = locals.front().device();
  Tensor piece = Tensor::empty({1, total}, dtype, device);
  std::int64_t at = 0;
  for (const Tensor& t : locals) {
    copy_strided(t, 0, 0, piece, 0, at, 1, t.numel());
    at += t.numel();
  }
  Tensor gathered = team.all_gather(piece);  // [C, total]
  std::vector<Tensor> teams;
  at = 0;
  for (const Tensor& t : locals) {
    Shape shape = t.shape();
    shape[seq_dim] *= C;
    Tensor out = Tensor::empty(shape, dtype, device);
    const SeqBlocks s = seq_blocks(t.shape(), seq_dim);
    for (int c = 0; c < C; ++c) member_slice_to_team(gathered, c * total + at, out, s, C, c);
    at += t.numel();
    teams.push_back(std::move(out));
  }
  return teams;
}

// Sums team tensors over the members in one reduce-scatter; returns each member's own rows.
std::vector<Tensor> reduce_scatter_team(comm::Group& team, const std::vector<Tensor>& teams, std::size_t seq_dim) {
  const int C = team.size();
  if (C == 1) return teams;
  check_one_dtype(teams, "the team reduce-scatter");
  const DType dtype = teams.front().dtype();
  std::vector<Shape> local_shapes;
  std::int64_t total = 0;
  for (const Tensor& t : teams) {
    Shape shape = t.shape();
    shape[seq_dim] /= C;
    total += shape_numel(shape);
    local_shapes.push_back(std::move(shape));
  }
  const Device device = teams.front().device();
  Tensor packed = Tensor::empty({C, total}, dtype, device);
  std::int64_t at = 0;
  for (std::size_t k = 0; k < teams.size(); ++k) {
    const SeqBlocks s = seq_blocks(local_shapes[k], seq_dim);
    for (int c = 0; c < C; ++c) team_to_member_slice(teams[k], packed, c * total + at, s, C, c);
    at += shape_numel(local_shapes[k]);
  }
  const Tensor mine = team.reduce_scatter(packed);  // [1, total]
  std::vector<Tensor> locals;
  at = 0;
  for (const Shape& shape : local_shapes) {
    Tensor out = Tensor::empty(shape, dtype, device);
    copy_strided(mine, 0, at, out, 0, 0, 1, out.numel());
    at += out.numel();
    locals.push_back(std::move(out));
  }
  return locals;
}

// ---- point to point ------------------------------------------------------------------------

// Tensors travelling together: send[k] goes to dst while recv[k] (same shape and dtype) arrives
// from src, one isendrecv each (the exchange form that also cannot deadlock on NCCL), all
// started at once. The tensors are held until wait(), which makes the current stream of their
// device wait for the transfers: on a device's own transport the host does not block.
class Transfer {
 public:
  Transfer(comm::Group& group, const std::vector<Tensor>& send, int dst, std::vector<Tensor>& recv, int src, int tag)
      : sending_(send), receiving_(recv) {
    for (std::size_t k = 0; k < send.size(); ++k) {
      requests_.push_back(group.isendrecv(send[k], dst, recv[k], src, tag + static_cast<int>(k)));
    }
  }
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  ~Transfer() {
    try {
      wait();
    } catch (...) {  // already failing: the watchdog ends a job that cannot finish
    }
  }
  void wait() {
    for (comm::Request& r : requests_) r.make_wait(Stream::current(receiving_.front().device()));
    requests_.clear();
    sending_.clear();
    receiving_.clear();
  }

 private:
  std::vector<comm::Request> requests_;
  std::vector<Tensor> sending_, receiving_;
};

// Sends `send` to dst and returns what src sent in its place (same shapes and dtypes); when
// both peers are this rank (a self-dispatch) nothing moves and `send` itself is returned.
std::vector<Tensor> swap_with(comm::Group& group, const std::vector<Tensor>& send, int dst, int src, int tag) {
  if (dst == group.rank()) {
    WF_CHECK(src == group.rank(), "{}: rank {} of '{}' sends to itself but receives from {}", kWhat, group.rank(),
             group.name(), src);
    return send;
  }
  std::vector<Tensor> recv = empty_like(send);
  Transfer(group, send, dst, recv, src, tag).wait();
  return recv;
}

// ---- the team's log-sum-exp combine and the backward's D -------------------------------------

// Combines the members' partial (o, lse) of the team's queries: returns lse* [B, h, C·n] and
// leaves o rescaled to this member's share of the final output (o_m · exp(lse_m − lse*)).
Tensor combine_team(comm::Group& team, int member, Tensor& o, const Tensor& lse) {
  if (team.size() == 1) return lse;
  const Tensor all = team.all_gather(lse.view({1, lse.numel()}));  // [C, B·h·C·n]
  const ops::Kernels k = ops::kernels_for(kWhat, {all, o, lse});
  Tensor lse_star = Tensor::empty(lse.shape(), lse.dtype(), k.device());
  Tensor weight = Tensor::empty(lse.shape(), lse.dtype(), k.device());
  // lse* summed in member order, so every member gets the same bits; this member's factor
  // exp(lse_m − lse*) is 0 where its partial saw no key, with no NaN where nobody did.
  k->team_lse_combine(k.stream, lse.dtype(), team.size(), lse.numel(), member, all.raw_data(), lse_star.raw_data(),
                      weight.raw_data());
  k->scale_attention_rows(k.stream, o.dtype(), o.size(0), o.size(1), o.size(2), o.size(3), o.raw_data(),
                          weight.raw_data());
  return lse_star;
}

// Member `member`'s n rows of lse [B, h, C·n] (the sequence is the last dim).
Tensor member_lse(const Tensor& lse, int C, int member) {
  if (C == 1) return lse;
  const std::int64_t n = lse.size(2) / C;
  Tensor out = Tensor::empty({lse.size(0), lse.size(1), n}, lse.dtype(), lse.device());
  team_to_member_slice(lse, out, 0, seq_blocks(out.shape(), 2), C, member);
  return out;
}

// −D = d_lse − rowsum(dO∘O) for this member's rows, [B, h, n]. The kernels' backward derives
// D = rowsum(dO∘O) − d_lse itself from the o and d_lse it is given; the travelling bundle has
// no final O (only its home member holds those rows), so the ring hands the kernels o = 0 and
// d_lse = −D, which yields exactly this D. The gradient arriving at lse is folded in here.
Tensor minus_delta(const Tensor& d_o, const Tensor& o, const Tensor& d_lse) {
  const std::int64_t B = o.size(0), n = o.size(1), h = o.size(2), d = o.size(3);
  const ops::Kernels k = ops::kernels_for(kWhat, {d_o, o, d_lse});
  Tensor out = Tensor::empty({B, h, n}, o.dtype(), k.device());
  k->attention_minus_delta(k.stream, o.dtype(), B, n, h, d, d_o.raw_data(), o.raw_data(),
                           d_lse.defined() ? d_lse.raw_data() : nullptr, out.raw_data());
  return out;
}

// ---- the autograd function -----------------------------------------------------------------

using CallOptions = detail::WallFacerCall;

// inputs q [B, n, h, d], k, v [B, n, h_kv, d]; outputs out [B, n, h, d], lse [B, h, n].
class WallFacerFunction final : public autograd::Function {
 public:
  // A replay (`replayed` set) never keeps the forward's K/V: it has none.
  WallFacerFunction(std::shared_ptr<const WallFacerRank> rank, CallOptions options,
                    std::shared_ptr<detail::WorkRecord> work, detail::Replayed replayed)
      : r_(std::move(rank)),
        options_(options),
        forward_steps_(steps(Pass::forward)),
        backward_steps_(steps(Pass::backward)),
        work_(std::move(work)),
        replayed_(std::move(replayed)),
        team_saved_(!replayed_) {
    if (replayed_) options_.keep_forward_kv = false;
  }

  TensorList forward(Context& ctx, const TensorList& in) override {
    const WallFacerRank& r = *r_;
    const DType act = in[0].dtype(), cdt = compute_dtype_of(act);
    if (replayed_) {
      // The member's rows only; the backward gathers the team's. With bf16 or f16 inputs O and
      // lse come back rounded, so D (and the gradients) differ from the forward's by that rounding.
      const AttentionResult rep = std::move(*replayed_);
      replayed_.reset();
      ctx.save_for_backward({in[0], rep.out.to(cdt), rep.lse.to(cdt), in[1], in[2]});
      return {rep.out, rep.lse};
    }
    const std::vector<Tensor> team_qkv = gather_team(*r.team, {in[0], in[1], in[2]}, 1);
    const Tensor& q_team = team_qkv[0];
    const std::vector<Tensor> kv0 = dispatch({team_qkv[1], team_qkv[2]});

    // The ring. With keep_forward_kv the step-0 K/V stays untouched for the backward; otherwise
    // its buffer receives again from step 1 on — unless it is the caller's own k, v (C = 1 and a
    // self-dispatch hand back the inputs themselves).
    const Device device = in[0].device();
    const DType mul = multiply_dtype_of(act, device);
    const Tensor q = q_team.to(mul);
    Tensor o = Tensor::zeros(q.shape(), cdt, device);
    Tensor lse =
        Tensor::full({q.size(0), q.size(2), q.size(1)}, -std::numeric_limits<double>::infinity(), cdt, device);
    const bool kv0_reusable = !options_.keep_forward_kv && !kv0[0].shares_storage_with(in[1]);
    std::vector<Tensor> spare[2];
    std::vector<Tensor> current = kv0;
    BlockAttentionStats work;
    const std::vector<int>& steps = forward_steps_;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const bool shift = i + 1 < steps.size();
      std::vector<Tensor> next;
      std::optional<Transfer> transfer;
      if (shift) {
        std::vector<Tensor>& buffer = spare[i % 2];
        if (buffer.empty()) buffer = (i % 2 == 1 && kv0_reusable) ? kv0 : empty_like(kv0);
        next = buffer;
        const int hop = steps[i + 1] - steps[i];  // to the rank that holds this K/V at the next kept step
        transfer.emplace(*r.ring, current, r.ring_ahead(hop), next, r.ring_ahead(-hop), kRingKvTag);
      }
      work += block_attention_forward(q, r.team_runs, current[0].to(mul), current[1].to(mul),
                                      r.kv_runs[static_cast<std::size_t>(steps[i])], options_.causal, options_.scale,
                                      o, lse, options_.documents);
      if (shift) {
        transfer->wait();
        current = std::move(next);
      }
    }
    work_->forward = work;

    const Tensor lse_star = combine_team(*r.team, r.member, o, lse);
    const Tensor out = reduce_scatter_team(*r.team, {o}, 1)[0];
    const Tensor lse_mine = member_lse(lse_star, r.C, r.member);
    // Saved: the team's Q (it travels in the backward), this member's final O (for D), lse*
    // of the team's queries, and the K/V the backward starts from.
    if (options_.keep_forward_kv)
      ctx.save_for_backward({q_team, out, lse_star, kv0[0], kv0[1]});
    else
      ctx.save_for_backward({q_team, out, lse_star, in[1], in[2]});
    return {out.to(act), lse_mine.to(act)};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    const WallFacerRank& r = *r_;
    // q, this member's final O, lse, and the K/V to start from. q and lse are the team's
    // (q_team, lse*) after a forward, the member's own rows after a replay.
    const TensorList& saved = ctx.saved();
    const Tensor& out = saved[1];
    const DType act = saved[0].dtype(), cdt = compute_dtype_of(act);
    const Device device = out.device();

    // 1. dO of the team's queries, and D of them (each member has the final O of its own rows).
    // After a replay q travels with dO and lse with D: the same two all-gathers.
    const Tensor d_out = grad[0].defined() ? grad[0] : Tensor::zeros(out.shape(), act, device);
    const Tensor d_lse = grad[1].defined() ? grad[1].to(cdt) : Tensor();
    std::vector<Tensor> rows{d_out.to(act)}, stats{minus_delta(d_out.to(cdt), out, d_lse)};
    if (!team_saved_) {
      rows.push_back(saved[0]);
      stats.push_back(saved[2]);
    }
    const std::vector<Tensor> team_rows = gather_team(*r.team, rows, 1), team_stats = gather_team(*r.team, stats, 2);
    const Tensor &dO_team = team_rows[0], &minus_d = team_stats[0];
    const Tensor& q_team = team_saved_ ? saved[0] : team_rows[1];
    const Tensor& lse_star = team_saved_ ? saved[2] : team_stats[1];

    // 2. The K/V this rank held at forward step 0, which stays here throughout.
    const std::vector<Tensor> kv = options_.keep_forward_kv ? std::vector<Tensor>{saved[3], saved[4]}
                                                            : dispatch(gather_team(*r.team, {saved[3], saved[4]}, 1));
    const DType mul = multiply_dtype_of(act, device);
    const Tensor k = kv[0].to(mul), v = kv[1].to(mul);
    Tensor dk = Tensor::zeros(k.shape(), cdt, device), dv = Tensor::zeros(v.shape(), cdt, device);

    // 3. The query bundles travel the sub-ring. Q, dO, lse*, −D are read-only: they go on to
    // ring next while this step computes. The dQ accumulator can only leave after the step, so
    // each step computes into a fresh buffer, then adds the accumulator that arrived meanwhile.
    const Tensor zero_o = Tensor::zeros(q_team.shape(), cdt, device);  // see minus_delta
    std::vector<Tensor> bundle = {q_team, dO_team, lse_star, minus_d};
    std::vector<Tensor> spare[2];
    Tensor dq;
    std::vector<Tensor> dq_in;
    std::optional<Transfer> dq_transfer;
    BlockAttentionStats work;
    const std::vector<int>& steps = backward_steps_;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const bool shift = i + 1 < steps.size();
      const int hop = shift ? steps[i + 1] - steps[i] : 0;  // to the rank the next kept step runs it on
      std::vector<Tensor> next;
      std::optional<Transfer> transfer;
      if (shift) {
        std::vector<Tensor>& buffer = spare[i % 2];
        if (buffer.empty()) buffer = empty_like(bundle);
        next = buffer;
        transfer.emplace(*r.ring, bundle, r.ring_ahead(hop), next, r.ring_ahead(-hop), kBundleTag);
      }
      dq = Tensor::zeros(zero_o.shape(), cdt, device);
      work += block_attention_backward(bundle[0].to(mul), r.bundle_runs[static_cast<std::size_t>(steps[i])], k, v,
                                       r.kv_runs[0], options_.causal, options_.scale, zero_o, bundle[2],
                                       bundle[1].to(mul), bundle[3], dq, dk, dv, options_.documents);
      if (i > 0) {
        dq_transfer->wait();
        detail::add_into(dq, dq_in[0]);
      }
      if (shift) {
        dq_in = empty_like({dq});
        dq_transfer.emplace(*r.ring, std::vector<Tensor>{dq}, r.ring_ahead(hop), dq_in, r.ring_ahead(-hop),
                            kBundleDqTag);
        transfer->wait();
        bundle = std::move(next);
      }
    }

    work_->backward = work;

    // 4. The last bundle started steps.back() positions back (ring next, after all G steps): its
    // dQ goes home. dK, dV go to the K/V's origin.
    std::vector<Tensor> dq_home = {dq};
    if (steps.size() > 1) {
      dq_home = empty_like({dq});
      Transfer(*r.ring, {dq}, r.ring_ahead(-steps.back()), dq_home, r.ring_ahead(steps.back()), kDqHomeTag).wait();
    }
    const std::vector<Tensor> dkv = swap_with(*r.sp, {dk, dv}, r.dispatch_from, r.dispatch_to, kDkvOriginTag);

    // 5. Sum over the members; each keeps its own rows.
    const std::vector<Tensor> grads = reduce_scatter_team(*r.team, {dq_home[0], dkv[0], dkv[1]}, 1);
    return {grads[0].to(act), grads[1].to(act), grads[2].to(act)};
  }

  std::string name() const override { return "WallFacerAttention"; }

 private:
  // The initial dispatch of the team's K, V (the rank's own when it dispatches to itself).
  std::vector<Tensor> dispatch(const std::vector<Tensor>& team_kv) const {
    return swap_with(*r_->sp, team_kv, r_->dispatch_to, r_->dispatch_from, kDispatchTag);
  }

  // The sub-ring steps each pass of this call runs (document_ring_steps.h).
  std::vector<int> steps(Pass pass) const {
    return wallfacer_steps(*r_->wallfacer, r_->teams, pass, options_.causal, options_.documents);
  }

  std::shared_ptr<const WallFacerRank> r_;
  CallOptions options_;
  std::vector<int> forward_steps_, backward_steps_;
  std::shared_ptr<detail::WorkRecord> work_;  // the strategy's: the backward runs after forward() returned
  detail::Replayed replayed_;
  bool team_saved_;  // the forward saved the team's Q and lse*; a replay saved the member's rows
};

// ---- the strategy --------------------------------------------------------------------------

class WallFacerAttention final : public nn::AttentionStrategy, public SpAttentionWork {
 public:
  WallFacerAttention(const SpAttentionConfig& config, comm::CommGrid& grid)
      : rank_(detail::locate_wallfacer(config, grid, "sp")), keep_forward_kv_(config.keep_forward_kv) {}

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) override {
    check_inputs(q, k, v, options);
    return run(q, k, v, options, std::nullopt);
  }

  // The backward re-dispatches K/V whatever keep_forward_kv says: checkpointing is for memory.
  AttentionResult replay(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                         const AttentionResult& saved) override {
    check_inputs(q, k, v, options);
    AttentionResult replayed = detail::check_replayed(kWhat, q, saved);
    work_->forward = {};
    return run(q, k, v, options, std::move(replayed));
  }

  std::string name() const override { return "wallfacer"; }
  BlockAttentionStats last_forward_work() const override { return work_->forward; }
  BlockAttentionStats last_backward_work() const override { return work_->backward; }

 private:
  AttentionResult run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                      detail::Replayed replayed) {
    const CallOptions call{options.causal, options.scale, keep_forward_kv_, options.doc_bounds};
    const std::shared_ptr<const WallFacerRank> laid_out = documents_.rank_for(rank_, options.doc_bounds, rank_->P,
                                                                              rank_->C, /*U=*/1);
    const TensorList outs = autograd::apply_function(
        std::make_shared<WallFacerFunction>(laid_out, call, work_, std::move(replayed)), {q, k, v});
    return {outs[0], outs[1]};
  }

  void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) const {
    const WallFacerRank& r = *rank_;
    WF_CHECK(q.defined() && k.defined() && v.defined(), "{}: q, k and v must be defined", kWhat);
    WF_CHECK(q.device() == k.device() && q.device() == v.device(),
             "{}: q, k and v must be on one device, got q on {}, k on {}, v on {}; move them with .to(...)", kWhat,
             q.device().str(), k.device().str(), v.device().str());
    WF_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "{}: q, k and v must share one floating dtype, got {}, {}, {}", kWhat, dtype_name(q.dtype()),
             dtype_name(k.dtype()), dtype_name(v.dtype()));
    const std::int64_t n = r.local_tokens();
    WF_CHECK(q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape() && q.size(1) == n && k.size(1) == n &&
                 q.size(0) == k.size(0) && q.size(3) == k.size(3) && k.size(2) >= 1 && q.size(2) % k.size(2) == 0,
             "{}: expected this rank's shards q [B, N/P = {}, h, d] and k, v [B, {}, h_kv, d] with h_kv dividing h "
             "(N = {}, P = {}), got q {}, k {}, v {}",
             kWhat, n, n, r.seq_len, r.P, shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
    WF_CHECK(options.q_offset == 0 && options.kv_offset == 0,
             "{}: positions come from the {} sequence layout, so q_offset and kv_offset must be 0 (got {} and {})",
             kWhat, sequence_layout_name(r.layout), options.q_offset, options.kv_offset);
    ops::check_document_bounds(kWhat, options.doc_bounds, q.size(0), r.seq_len);
  }

  std::shared_ptr<const WallFacerRank> rank_;
  detail::WallFacerDocuments documents_;  // rank_ laid out for the last packed documents
  bool keep_forward_kv_;
  std::shared_ptr<detail::WorkRecord> work_ = std::make_shared<detail::WorkRecord>();
};

}  // namespace

std::shared_ptr<autograd::Function> detail::make_wallfacer_function(std::shared_ptr<const WallFacerRank> rank,
                                                                    const WallFacerCall& call,
                                                                    std::shared_ptr<WorkRecord> work,
                                                                    Replayed replayed) {
  return std::make_shared<WallFacerFunction>(std::move(rank), call, std::move(work), std::move(replayed));
}

std::shared_ptr<nn::AttentionStrategy> make_wallfacer_attention(const SpAttentionConfig& config, comm::CommGrid& grid) {
  return std::make_shared<WallFacerAttention>(config, grid);
}

}  // namespace wf::parallel

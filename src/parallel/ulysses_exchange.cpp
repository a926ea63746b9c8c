// The Ulysses all-to-all: packing each peer's block, one all-to-all, unpacking (ulysses_exchange.h),
// the packing and unpacking by the device's ulysses_block kernel.
#include "src/parallel/ulysses_exchange.h"

#include <cstddef>
#include <numeric>

#include "src/ops/common.h"
#include "wallfacer/core/error.h"

namespace wf::parallel::detail {

Field tokens_major(const Tensor& t, std::optional<DType> wire) {
  return {t, t.size(1), t.size(2), t.size(3), false, wire.value_or(t.dtype())};
}
Field heads_major(const Tensor& t, std::optional<DType> wire) {
  return {t, t.size(2), t.size(1), 1, true, wire.value_or(t.dtype())};
}

Field activation_field(const Tensor& t, DType activation) { return tokens_major(t, activation); }
Field statistics_field(const Tensor& t, DType activation) { return heads_major(t, compute_dtype_of(activation)); }

namespace {

// The block a rank exchanges with `peer` for one field (kernels/sp_kernel_args.h), `move`d
// between the tensor and the message by the field's device's ulysses_block kernel. The block
// holds (b, i, hh, c) for b < B, i < n (the local tokens), hh < the head-sharded field's head
// count `heads_per_rank`, in that order. On the sequence side that is this rank's token i and
// global head peer·H/P + hh, H = f.heads, the field's global head count (for a replicated kv
// head, H < P, it is the kv head the peer's query heads read); on the head side it is the peer's
// i-th token (at its head-side position, Positions) and local head hh. Sender and receiver walk
// the same order, so the block a rank packs for a peer is exactly what that peer unpacks from it.
kernels::UlyssesBlock field_block(const Field& f, Side side, int peer, int P, std::int64_t heads_per_rank,
                                  const std::vector<std::int64_t>& peer_tokens, kernels::BlockMove move) {
  kernels::UlyssesBlock block;
  block.dtype = f.t.dtype();
  block.wire = f.wire;
  block.batch = f.t.size(0);
  block.tokens = f.tokens;
  block.heads = f.heads;
  block.width = f.width;
  block.heads_first = f.heads_first;
  block.first_head = side == Side::sequence ? peer * f.heads / P : 0;
  block.block_heads = heads_per_rank;
  if (side == Side::sequence) {
    block.rows.resize(peer_tokens.size());
    std::iota(block.rows.begin(), block.rows.end(), std::int64_t{0});
  } else {
    block.rows = peer_tokens;
  }
  block.move = move;
  return block;
}

// The bytes of one field's block for one peer.
std::int64_t block_bytes(const Field& f, std::int64_t tokens, std::int64_t heads_per_rank) {
  return f.t.size(0) * tokens * heads_per_rank * f.width * static_cast<std::int64_t>(dtype_size(f.wire));
}

// Walks every field's block for every peer through `buffer`, in the same order on both sides;
// returns the bytes walked.
std::int64_t walk_message(const ops::Kernels& k, const std::vector<Field>& fields, Side side, int P,
                          const Positions& positions, const std::vector<std::int64_t>& heads_per_rank,
                          const std::vector<kernels::BlockMove>& moves, void* buffer) {
  std::int64_t at = 0;
  for (int peer = 0; peer < P; ++peer) {
    for (std::size_t j = 0; j < fields.size(); ++j) {
      const kernels::UlyssesBlock block = field_block(fields[j], side, peer, P, heads_per_rank[j],
                                                      positions[static_cast<std::size_t>(peer)], moves[j]);
      Tensor t = fields[j].t;  // a handle to the field's storage: unpacking writes through it
      k->ulysses_block(k.stream, block, t.raw_data(), static_cast<std::byte*>(buffer) + at);
      at += block.bytes();
    }
  }
  return at;
}

// Moves `from` (held on side `from_side`) into `to` (the other side) with one all-to-all of
// bytes, each field in its wire dtype. from[j] and to[j] are the same tensor on the two sides.
// A field with fewer global heads than P (a replicated kv head or its gradient) is copied to
// every sharer on the way to the head side and summed over them on the way back.
void exchange(comm::Group& sp, const Positions& positions, Side from_side, const std::vector<Field>& from,
              const std::vector<Field>& to) {
  const int P = sp.size();
  const Side to_side = from_side == Side::sequence ? Side::heads : Side::sequence;
  const Device device = from.front().t.device();
  std::vector<std::int64_t> heads_per_rank(from.size());
  std::int64_t block = 0;
  for (std::size_t j = 0; j < from.size(); ++j) {
    WF_CHECK(from[j].wire == to[j].wire, "ulysses exchange: field {} is sent as {} but received as {}", j,
             dtype_name(from[j].wire), dtype_name(to[j].wire));
    for (const Tensor* t : {&from[j].t, &to[j].t}) {
      WF_CHECK(t->device() == device, "ulysses exchange: field {} is on {} but the first field on {}; an exchange "
               "moves tensors of one device (move them with .to(...))", j, t->device().str(), device.str());
    }
    heads_per_rank[j] = (from_side == Side::heads ? from[j] : to[j]).heads;
    block += block_bytes(from[j], static_cast<std::int64_t>(positions[0].size()), heads_per_rank[j]);
  }
  Tensor send = Tensor::empty({P * block}, DType::u8, device);
  const ops::Kernels k = ops::kernels_for("ulysses exchange", {send});
  const std::int64_t packed = walk_message(k, from, from_side, P, positions, heads_per_rank,
                                           std::vector<kernels::BlockMove>(from.size(), kernels::BlockMove::pack),
                                           send.raw_data());
  WF_CHECK(packed == static_cast<std::int64_t>(send.nbytes()), "ulysses exchange: packed {} of {} bytes", packed,
           send.nbytes());
  Tensor received = send;  // a group of one exchanges with itself
  if (P > 1) received = sp.all_to_all(send);
  std::vector<kernels::BlockMove> unpack(to.size(), kernels::BlockMove::unpack);
  for (std::size_t j = 0; j < to.size(); ++j) {
    const bool replicated = (from_side == Side::sequence ? from[j] : to[j]).heads < P;
    if (to_side == Side::sequence && replicated) {
      Tensor sum = to[j].t;  // shares the storage
      sum.zero_();           // the sharers' blocks add up in it
      unpack[j] = kernels::BlockMove::unpack_add;
    }
  }
  walk_message(ops::kernels_for("ulysses exchange", {received}), to, to_side, P, positions, heads_per_rank, unpack,
               received.raw_data());
}

}  // namespace

HeadSide::HeadSide(std::int64_t batch, std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads,
                   std::int64_t head_dim, DType inputs, std::optional<DType> results, Device device)
    : q(Tensor::empty({batch, tokens, heads, head_dim}, inputs, device)),
      k(Tensor::empty({batch, tokens, kv_heads, head_dim}, inputs, device)),
      v(Tensor::empty(k.shape(), inputs, device)),
      o(results ? Tensor::empty(q.shape(), *results, device) : Tensor()),
      lse(results ? Tensor::empty({batch, heads, tokens}, *results, device) : Tensor()) {}

std::optional<autograd::TensorList> save_replay(autograd::Context& ctx, const autograd::TensorList& in,
                                                Replayed& replayed) {
  if (!replayed) return std::nullopt;
  const AttentionResult r = std::move(*replayed);
  replayed.reset();
  ctx.save_for_backward({in[0], in[1], in[2], r.out, r.lse});
  return autograd::TensorList{r.out, r.lse};
}

void add_replayed_fields(const autograd::TensorList& saved, HeadSide& h, DType activation, std::vector<Field>& from,
                         std::vector<Field>& to) {
  const auto a = [&](const Tensor& t) { return activation_field(t, activation); };
  const auto s = [&](const Tensor& t) { return statistics_field(t, activation); };
  from.insert(from.end(), {a(saved[0]), a(saved[1]), a(saved[2]), a(saved[3]), s(saved[4])});
  to.insert(to.end(), {a(h.q), a(h.k), a(h.v), a(h.o), s(h.lse)});
}

void ulysses_exchange(comm::Group& group, const Positions& positions, Side from_side, const std::vector<Field>& from,
                      const std::vector<Field>& to) {
  WF_CHECK(!from.empty() && from.size() == to.size(), "ulysses exchange: {} tensors to send but {} to receive",
           from.size(), to.size());
  exchange(group, positions, from_side, from, to);
}

}  // namespace wf::parallel::detail

// The Ulysses all-to-all: packing each peer's block, one all-to-all, unpacking (ulysses_exchange.h).
#include "src/parallel/ulysses_exchange.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wf::parallel::detail {

Field tokens_major(const Tensor& t) { return {t, t.size(1), t.size(2), t.size(3), false}; }
Field heads_major(const Tensor& t) { return {t, t.size(2), t.size(1), 1, true}; }

namespace {

// What walk_block does with each element: pack it into the message, or unpack the message into
// it, overwriting or adding (the sum over the ranks that shared a replicated kv head).
enum class Move { pack, unpack, unpack_add };

// Copies the block a rank exchanges with `peer` for one field to or from a buffer and returns
// the position after it. The block holds (b, i, hh, c) for b < B, i < n (the local tokens), hh < the
// head-sharded field's head count `heads_per_rank`, in that order. On the sequence side that is
// this rank's token i and global head peer·H/P + hh, H = f.heads, the field's global head count
// (for a replicated kv head, H < P, it is the kv head the peer's query heads read); on the head
// side it is the peer's i-th token (at its head-side position, Positions) and local head hh. Sender and
// receiver walk the same order, so the block a rank packs for a peer is exactly what that peer
// unpacks from it.
template <class T>
T* walk_block(const Field& f, Side side, int peer, int P, std::int64_t heads_per_rank,
              const std::vector<std::int64_t>& peer_tokens, T* block, Move move) {
  T* base = const_cast<T*>(f.t.data<T>());
  const auto n = static_cast<std::int64_t>(peer_tokens.size());
  const std::int64_t first_head = side == Side::sequence ? peer * f.heads / P : 0;
  for (std::int64_t b = 0; b < f.t.size(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t token = side == Side::sequence ? i : peer_tokens[static_cast<std::size_t>(i)];
      for (std::int64_t hh = 0; hh < heads_per_rank; ++hh) {
        T* element = base + f.at(b, token, first_head + hh);
        switch (move) {
          case Move::pack: std::copy_n(element, f.width, block); break;
          case Move::unpack: std::copy_n(block, f.width, element); break;
          case Move::unpack_add:
            for (std::int64_t c = 0; c < f.width; ++c) element[c] += block[c];
            break;
        }
        block += f.width;
      }
    }
  }
  return block;
}

// Moves `from` (held on side `from_side`) into `to` (the other side) with one all-to-all.
// from[j] and to[j] are the same tensor on the two sides. A field with fewer global heads than
// P (a replicated kv head or its gradient) is copied to every sharer on the way to the head side
// and summed over them on the way back.
template <class T>
void exchange(comm::Group& sp, const Positions& positions, Side from_side, const std::vector<Field>& from,
              const std::vector<Field>& to) {
  const int P = sp.size();
  const Side to_side = from_side == Side::sequence ? Side::heads : Side::sequence;
  const auto heads_per_rank = [&](std::size_t j) { return (from_side == Side::heads ? from[j] : to[j]).heads; };
  const auto replicated = [&](std::size_t j) { return (from_side == Side::sequence ? from[j] : to[j]).heads < P; };
  std::int64_t block = 0;
  for (std::size_t j = 0; j < from.size(); ++j) {
    block += from[j].t.size(0) * static_cast<std::int64_t>(positions[0].size()) * heads_per_rank(j) * from[j].width;
  }
  Tensor send = Tensor::empty({P * block}, dtype_v<T>);
  T* p = send.data<T>();
  for (int peer = 0; peer < P; ++peer) {
    for (std::size_t j = 0; j < from.size(); ++j) {
      p = walk_block<T>(from[j], from_side, peer, P, heads_per_rank(j), positions[static_cast<std::size_t>(peer)], p,
                        Move::pack);
    }
  }
  Tensor received = send;  // a group of one exchanges with itself
  if (P > 1) received = sp.all_to_all(send);
  std::vector<Move> unpack(to.size(), Move::unpack);
  for (std::size_t j = 0; j < to.size(); ++j) {
    if (to_side == Side::sequence && replicated(j)) {
      Tensor sum = to[j].t;  // shares the storage
      sum.zero_();           // the sharers' blocks add up in it
      unpack[j] = Move::unpack_add;
    }
  }
  p = received.data<T>();
  for (int peer = 0; peer < P; ++peer) {
    for (std::size_t j = 0; j < to.size(); ++j) {
      p = walk_block<T>(to[j], to_side, peer, P, heads_per_rank(j), positions[static_cast<std::size_t>(peer)], p,
                        unpack[j]);
    }
  }
}

}  // namespace

HeadSide::HeadSide(std::int64_t batch, std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads,
                   std::int64_t head_dim, DType dtype)
    : q(Tensor::empty({batch, tokens, heads, head_dim}, dtype)),
      k(Tensor::empty({batch, tokens, kv_heads, head_dim}, dtype)),
      v(Tensor::empty(k.shape(), dtype)),
      o(Tensor::empty(q.shape(), dtype)),
      lse(Tensor::empty({batch, heads, tokens}, dtype)) {}

std::optional<autograd::TensorList> save_replay(autograd::Context& ctx, const autograd::TensorList& in,
                                                Replayed& replayed) {
  if (!replayed) return std::nullopt;
  const AttentionResult r = std::move(*replayed);
  replayed.reset();
  ctx.save_for_backward({in[0], in[1], in[2], r.out, r.lse});
  return autograd::TensorList{r.out, r.lse};
}

void add_replayed_fields(const autograd::TensorList& saved, HeadSide& h, std::vector<Field>& from,
                         std::vector<Field>& to) {
  from.insert(from.end(), {tokens_major(saved[0]), tokens_major(saved[1]), tokens_major(saved[2]),
                           tokens_major(saved[3]), heads_major(saved[4])});
  to.insert(to.end(),
            {tokens_major(h.q), tokens_major(h.k), tokens_major(h.v), tokens_major(h.o), heads_major(h.lse)});
}

void ulysses_exchange(comm::Group& group, const Positions& positions, Side from_side, const std::vector<Field>& from,
                      const std::vector<Field>& to) {
  WF_CHECK(!from.empty() && from.size() == to.size(), "ulysses exchange: {} tensors to send but {} to receive",
           from.size(), to.size());
  dispatch_float(from.front().t.dtype(), "ulysses exchange",
                 [&](auto tag) { exchange<decltype(tag)>(group, positions, from_side, from, to); });
}

}  // namespace wf::parallel::detail

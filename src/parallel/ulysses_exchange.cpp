// The Ulysses all-to-all: packing each peer's block, one all-to-all, unpacking (ulysses_exchange.h).
#include "src/parallel/ulysses_exchange.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

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

// What walk_block does with each element: pack it into the message, or unpack the message into
// it, overwriting or adding (the sum over the ranks that shared a replicated kv head).
enum class Move { pack, unpack, unpack_add };

// One element from storage type From to To: exact for widening, round to nearest even for
// narrowing (f32 → bf16 directly; anything else through double, correctly rounded).
template <class To, class From>
To convert(From x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else if constexpr (std::is_same_v<From, bf16> && std::is_same_v<To, float>) return bf16_to_float(x);
  else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bf16>) return float_to_bf16(x);
  else return from_double<To>(to_double(x));
}

// A run of n elements into the message (rounded to the wire type W) and out of it (widened to
// the tensor's E, written or added). The message packs fields of different widths back to back,
// so an element may sit at any byte: it is read and written with memcpy, never through a W*.
template <class W, class E>
void pack_run(const E* from, std::int64_t n, std::byte* to) {
  if constexpr (std::is_same_v<W, E>) {
    std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(W));
  } else {
    for (std::int64_t c = 0; c < n; ++c) {
      const W w = convert<W>(from[c]);
      std::memcpy(to + static_cast<std::size_t>(c) * sizeof(W), &w, sizeof w);
    }
  }
}
template <class W, class E>
void unpack_run(const std::byte* from, std::int64_t n, E* to, bool add) {
  if constexpr (std::is_same_v<W, E>) {
    if (!add) {
      std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(W));
      return;
    }
  }
  for (std::int64_t c = 0; c < n; ++c) {
    W w;
    std::memcpy(&w, from + static_cast<std::size_t>(c) * sizeof(W), sizeof w);
    if (!add) {
      to[c] = convert<E>(w);
    } else if constexpr (std::is_floating_point_v<E>) {
      to[c] += convert<E>(w);
    } else {
      WF_FAIL("ulysses exchange: a sum over kv-head sharers needs an f32 or f64 destination, got {}",
              dtype_name(dtype_v<E>));
    }
  }
}

// Copies the block a rank exchanges with `peer` for one field to or from the message, W being
// the field's wire type and E its tensor's, and returns the position after it. The block holds
// (b, i, hh, c) for b < B, i < n (the local tokens), hh < the head-sharded field's head count
// `heads_per_rank`, in that order. On the sequence side that is this rank's token i and global
// head peer·H/P + hh, H = f.heads, the field's global head count (for a replicated kv head,
// H < P, it is the kv head the peer's query heads read); on the head side it is the peer's i-th
// token (at its head-side position, Positions) and local head hh. Sender and receiver walk the
// same order, so the block a rank packs for a peer is exactly what that peer unpacks from it.
template <class W, class E>
std::byte* walk_block(const Field& f, Side side, int peer, int P, std::int64_t heads_per_rank,
                      const std::vector<std::int64_t>& peer_tokens, std::byte* block, Move move) {
  E* base = const_cast<E*>(f.t.data<E>());
  const auto n = static_cast<std::int64_t>(peer_tokens.size());
  const std::int64_t first_head = side == Side::sequence ? peer * f.heads / P : 0;
  for (std::int64_t b = 0; b < f.t.size(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t token = side == Side::sequence ? i : peer_tokens[static_cast<std::size_t>(i)];
      for (std::int64_t hh = 0; hh < heads_per_rank; ++hh) {
        E* element = base + f.at(b, token, first_head + hh);
        if (move == Move::pack) {
          pack_run<W>(element, f.width, block);
        } else {
          unpack_run<W>(block, f.width, element, move == Move::unpack_add);
        }
        block += static_cast<std::size_t>(f.width) * sizeof(W);
      }
    }
  }
  return block;
}

// Calls f(W{}, E{}) with W the C++ type of the field's wire dtype and E that of its tensor.
template <class F>
void dispatch_field(const Field& field, F&& f) {
  const auto one = [](DType dtype, auto&& g) {
    switch (dtype) {
      case DType::f32: return g(float{});
      case DType::f64: return g(double{});
      case DType::bf16: return g(bf16{});
      default: break;
    }
    WF_FAIL("ulysses exchange: dtype {} cannot travel (f32, f64 or bf16)", dtype_name(dtype));
  };
  one(field.wire, [&](auto w) { one(field.t.dtype(), [&](auto e) { f(w, e); }); });
}

// The bytes of one field's block for one peer.
std::int64_t block_bytes(const Field& f, std::int64_t tokens, std::int64_t heads_per_rank) {
  return f.t.size(0) * tokens * heads_per_rank * f.width * static_cast<std::int64_t>(dtype_size(f.wire));
}

// Walks every field's block for every peer through `buffer`, in the same order on both sides.
std::byte* walk_message(const std::vector<Field>& fields, Side side, int P, const Positions& positions,
                        const std::vector<std::int64_t>& heads_per_rank, const std::vector<Move>& moves,
                        std::byte* buffer) {
  for (int peer = 0; peer < P; ++peer) {
    for (std::size_t j = 0; j < fields.size(); ++j) {
      dispatch_field(fields[j], [&](auto w, auto e) {
        using W = decltype(w);
        using E = decltype(e);
        buffer = walk_block<W, E>(fields[j], side, peer, P, heads_per_rank[j],
                                  positions[static_cast<std::size_t>(peer)], buffer, moves[j]);
      });
    }
  }
  return buffer;
}

// Moves `from` (held on side `from_side`) into `to` (the other side) with one all-to-all of
// bytes, each field in its wire dtype. from[j] and to[j] are the same tensor on the two sides.
// A field with fewer global heads than P (a replicated kv head or its gradient) is copied to
// every sharer on the way to the head side and summed over them on the way back.
void exchange(comm::Group& sp, const Positions& positions, Side from_side, const std::vector<Field>& from,
              const std::vector<Field>& to) {
  const int P = sp.size();
  const Side to_side = from_side == Side::sequence ? Side::heads : Side::sequence;
  std::vector<std::int64_t> heads_per_rank(from.size());
  std::int64_t block = 0;
  for (std::size_t j = 0; j < from.size(); ++j) {
    WF_CHECK(from[j].wire == to[j].wire, "ulysses exchange: field {} is sent as {} but received as {}", j,
             dtype_name(from[j].wire), dtype_name(to[j].wire));
    heads_per_rank[j] = (from_side == Side::heads ? from[j] : to[j]).heads;
    block += block_bytes(from[j], static_cast<std::int64_t>(positions[0].size()), heads_per_rank[j]);
  }
  Tensor send = Tensor::empty({P * block}, DType::u8);
  std::byte* end = walk_message(from, from_side, P, positions, heads_per_rank,
                                std::vector<Move>(from.size(), Move::pack), static_cast<std::byte*>(send.raw_data()));
  WF_CHECK(end == static_cast<std::byte*>(send.raw_data()) + send.nbytes(), "ulysses exchange: packed {} of {} bytes",
           end - static_cast<std::byte*>(send.raw_data()), send.nbytes());
  Tensor received = send;  // a group of one exchanges with itself
  if (P > 1) received = sp.all_to_all(send);
  std::vector<Move> unpack(to.size(), Move::unpack);
  for (std::size_t j = 0; j < to.size(); ++j) {
    const bool replicated = (from_side == Side::sequence ? from[j] : to[j]).heads < P;
    if (to_side == Side::sequence && replicated) {
      Tensor sum = to[j].t;  // shares the storage
      sum.zero_();           // the sharers' blocks add up in it
      unpack[j] = Move::unpack_add;
    }
  }
  walk_message(to, to_side, P, positions, heads_per_rank, unpack, static_cast<std::byte*>(received.raw_data()));
}

}  // namespace

HeadSide::HeadSide(std::int64_t batch, std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads,
                   std::int64_t head_dim, DType inputs, std::optional<DType> results)
    : q(Tensor::empty({batch, tokens, heads, head_dim}, inputs)),
      k(Tensor::empty({batch, tokens, kv_heads, head_dim}, inputs)),
      v(Tensor::empty(k.shape(), inputs)),
      o(results ? Tensor::empty(q.shape(), *results) : Tensor()),
      lse(results ? Tensor::empty({batch, heads, tokens}, *results) : Tensor()) {}

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

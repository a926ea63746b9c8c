#pragma once
// The Ulysses all-to-all (internal to src/parallel): moves tensors between the sequence-sharded
// side (this rank's tokens, every head) and the head-sharded side (every rank's tokens, a share
// of the heads) of a group of ranks in one message. Ulysses attention uses it over the sp group;
// the ulysses-wallfacer hybrid over its "sp.ulysses" group, where the head side holds a
// WallFacer member's shard in storage order.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "src/parallel/sp_strategy_base.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"

namespace wf::parallel::detail {

// [rank][i]: where group rank `rank`'s i-th token sits on the head side's token dim (Ulysses:
// its global position; the hybrid: its index in the WallFacer member's storage).
using Positions = std::vector<std::vector<std::int64_t>>;

// One tensor taking part in an exchange, addressed as elements (batch b, token i, head, c) with
// c < width: q, k, v, o and their gradients are [B, tokens, heads, width]; lse and its gradient
// are [B, heads, tokens] with width 1. `wire` is the dtype its elements travel in: packing
// rounds them to it and unpacking widens them from it, so the two sides of an exchange may hold
// one tensor in different dtypes (bf16 on the wire, f32 where it is computed or summed).
struct Field {
  Tensor t;
  std::int64_t tokens, heads, width;
  bool heads_first;
  DType wire;
};
// Both travel in `wire`, by default the tensor's own dtype.
Field tokens_major(const Tensor& t, std::optional<DType> wire = std::nullopt);  // [B, tokens, heads, width]
Field heads_major(const Tensor& t, std::optional<DType> wire = std::nullopt);   // [B, heads, tokens]

enum class Side { sequence, heads };

// Moves `from` (held on side `from_side`) into `to` (the other side) with one all-to-all over
// `group` (no message for a group of one). from[j] and to[j] are the same tensor on the two
// sides (f32, f64 or bf16 each), travelling in from[j].wire (to[j].wire must agree). Head-side
// rank r holds heads [r·H/P, (r+1)·H/P) of a field with H global heads; a field with fewer
// global heads than P (a replicated kv head or its gradient, ulysses_heads.h) is copied to every
// sharer on the way to the head side and summed over them, in rank order and in to[j]'s dtype
// (f32 for a bf16 wire: bf16 travel, f32 accumulation), on the way back.
void ulysses_exchange(comm::Group& group, const Positions& positions, Side from_side, const std::vector<Field>& from,
                      const std::vector<Field>& to);

// The head side of one call: `tokens` tokens, `heads` query heads and `kv_heads` kv heads:
// q, o [B, tokens, heads, d], k, v [B, tokens, kv_heads, d], lse [B, heads, tokens]; q, k, v in
// `inputs`, o and lse in `results` (f32 beside bf16 inputs: what the attention computes), or
// left undefined without `results` (a caller whose attention returns its own); on `device`.
struct HeadSide {
  Tensor q, k, v, o, lse;
  HeadSide(std::int64_t batch, std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
           DType inputs, std::optional<DType> results, Device device);
  HeadSide(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse)  // saved ones
      : q(std::move(q)), k(std::move(k)), v(std::move(v)), o(std::move(o)), lse(std::move(lse)) {}
};

// ---- what travels in which dtype (every strategy built on this exchange) -----------------------
// Q, K, V, O and their gradients travel in the activation dtype (bf16 under bf16 mixed
// precision: half an f32 copy's bytes); lse and its gradient in the compute dtype (f32 for bf16,
// as every sp strategy moves its statistics: traffic_model.h's ElementBytes::stats).
Field activation_field(const Tensor& t, DType activation);   // tokens-major
Field statistics_field(const Tensor& t, DType activation);   // heads-major

// The replay of a strategy built on this exchange (Ulysses, the hybrid): its autograd Function's
// forward saves the sequence-sharded q, k, v (`in`) and the replayed out, lse, moves nothing,
// and returns them. std::nullopt (and nothing saved) when `replayed` is not set.
std::optional<autograd::TensorList> save_replay(autograd::Context& ctx, const autograd::TensorList& in,
                                                Replayed& replayed);
// In the replay's backward, the saved q, k, v, out, lse (of dtype `activation`) travel to the
// head side `h` with dO: appends them to the exchange's fields.
void add_replayed_fields(const autograd::TensorList& saved, HeadSide& h, DType activation, std::vector<Field>& from,
                         std::vector<Field>& to);

}  // namespace wf::parallel::detail

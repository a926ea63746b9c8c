// Autograd-aware collectives (semantics and the gradient convention in collectives.h). Every
// function is one node whose forward and backward are each a single Group collective; the
// non-differentiable collectives below are the building blocks of both directions.
#include "wallfacer/parallel/collectives.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

#include "wallfacer/autograd/function.h"
#include "wallfacer/core/error.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf::parallel {
using comm::Group;
using comm::ReduceOp;
namespace {

using autograd::Context;
using autograd::TensorList;
using Collective = std::function<Tensor(Group&, const Tensor&)>;

// ---- non-differentiable building blocks (run with grad mode off, inside a node) --------------

Tensor gather_rows(Group& group, const Tensor& t) { return group.all_gather(t); }
Tensor sum_scatter_rows(Group& group, const Tensor& t) { return group.reduce_scatter(t, ReduceOp::sum); }
Tensor exchange_rows(Group& group, const Tensor& t) { return group.all_to_all(t); }
Tensor identity(Group&, const Tensor& t) { return t; }
Tensor sum_over_group(Group& group, const Tensor& t) {
  Tensor sum = t.clone();  // the collective works in place; the input must stay untouched
  group.all_reduce(sum, ReduceOp::sum);
  return sum;
}

// This rank's slice of the last dim (forward of scatter_last_dim, backward of gather_last_dim).
Tensor own_columns(Group& group, const Tensor& t) {
  const std::int64_t k = t.size(-1) / group.size();
  return narrow(t, -1, group.rank() * k, k);
}

// all-gather along the last dim: gather rows of the [rows, k] view, then move the rank index
// next to the last dim, [P, rows, k] → [rows, P, k] → [..., P·k].
Tensor gather_columns(Group& group, const Tensor& t) {
  const std::int64_t P = group.size(), k = t.size(-1), rows = t.numel() / std::max<std::int64_t>(k, 1);
  const Tensor gathered = group.all_gather(reshape(t, {rows, k}));
  Shape out = t.shape();
  out.back() = P * k;
  if (P == 1) return reshape(gathered, out);
  return reshape(permute(reshape(gathered, {P, rows, k}), {1, 0, 2}), out);
}

// permute that skips the copy when the order is the identity.
Tensor permuted(const Tensor& t, const std::vector<std::int64_t>& order) {
  for (std::size_t d = 0; d < order.size(); ++d)
    if (order[d] != static_cast<std::int64_t>(d)) return permute(t, order);
  return t;
}

// The re-sharding of all_to_all_dims, on normalised dims. With P ranks, S = x.size(scatter)
// and G = x.size(gather):
//   1. split the scatter dim into (P, S/P) and move P to the front, so that the block for rank i
//      is contiguous rows of dim 0;
//   2. all-to-all along dim 0: block i of the result came from rank i and is rank i's slice of
//      the gather dim (with this rank's slice of the scatter dim);
//   3. move the block index next to the gather dim, in front of it, and merge the two, so that
//      rank i's slice lands at [i·G, (i+1)·G) of the gathered dim.
Tensor reshard(Group& group, const Tensor& x, std::int64_t scatter, std::int64_t gather) {
  const std::int64_t P = group.size();
  const Shape& shape = x.shape();
  const auto ndim = static_cast<std::int64_t>(shape.size());

  Shape split = shape;
  split[scatter] = shape[scatter] / P;
  split.insert(split.begin() + scatter, P);
  std::vector<std::int64_t> to_front{scatter};  // dims of `split`: P, then the rest in order
  for (std::int64_t d = 0; d <= ndim; ++d)
    if (d != scatter) to_front.push_back(d);
  const Tensor send = permuted(reshape(x, split), to_front);

  const Tensor received = group.all_to_all(send);  // [P, dims of x with scatter → S/P]

  std::vector<std::int64_t> block_before_gather;  // dims of `received`: x's dims are 1..ndim
  for (std::int64_t d = 0; d < ndim; ++d) {
    if (d == gather) block_before_gather.push_back(0);
    block_before_gather.push_back(d + 1);
  }
  Shape out = shape;
  out[scatter] = shape[scatter] / P;
  out[gather] = shape[gather] * P;
  return reshape(permuted(received, block_before_gather), out);
}

// One autograd node: `forward` on the input, `backward` on the output's gradient.
Tensor differentiable(const char* name, Group& group, const Tensor& x, Collective forward, Collective backward) {
  WF_CHECK(x.defined(), "parallel::{} on group '{}': the input tensor is undefined", name, group.name());
  WF_CHECK(x.dim() >= 1, "parallel::{} on group '{}': the input must have at least one dimension, got shape {}", name,
           group.name(), shape_str(x.shape()));
  Group* g = &group;
  return autograd::apply_function(
      fmt::format("parallel::{}[{}]", name, group.name()), {x},
      [g, forward = std::move(forward)](Context&, const TensorList& in) { return TensorList{forward(*g, in[0])}; },
      [g, backward = std::move(backward)](Context&, const TensorList& grad) {
        return TensorList{backward(*g, grad[0])};
      })[0];
}

}  // namespace

Tensor all_gather(Group& group, const Tensor& x) {
  return differentiable("all_gather", group, x, gather_rows, sum_scatter_rows);
}

Tensor reduce_scatter(Group& group, const Tensor& x) {
  return differentiable("reduce_scatter", group, x, sum_scatter_rows, gather_rows);
}

Tensor all_reduce(Group& group, const Tensor& x) {
  return differentiable("all_reduce", group, x, sum_over_group, identity);
}

Tensor copy_to_group(Group& group, const Tensor& x) {
  return differentiable("copy_to_group", group, x, identity, sum_over_group);
}

Tensor scatter_last_dim(Group& group, const Tensor& x) {
  WF_CHECK(!x.defined() || x.dim() == 0 || x.size(-1) % group.size() == 0,
           "parallel::scatter_last_dim on group '{}': the last dim of shape {} does not split into {} equal slices",
           group.name(), shape_str(x.shape()), group.size());
  return differentiable("scatter_last_dim", group, x, own_columns, gather_columns);
}

Tensor gather_last_dim(Group& group, const Tensor& x) {
  return differentiable("gather_last_dim", group, x, gather_columns, own_columns);
}

Tensor all_to_all(Group& group, const Tensor& x) {
  return differentiable("all_to_all", group, x, exchange_rows, exchange_rows);
}

Tensor all_to_all_dims(Group& group, const Tensor& x, std::int64_t scatter_dim, std::int64_t gather_dim) {
  WF_CHECK(x.defined(), "parallel::all_to_all_dims on group '{}': the input tensor is undefined", group.name());
  WF_CHECK(x.dim() >= 2,
           "parallel::all_to_all_dims on group '{}': the input needs two distinct dims to re-shard, got shape {}",
           group.name(), shape_str(x.shape()));
  const auto checked_dim = [&](const char* role, std::int64_t dim) {
    WF_CHECK(dim >= -x.dim() && dim < x.dim(), "parallel::all_to_all_dims on group '{}': {} {} is out of range for shape {}",
             group.name(), role, dim, shape_str(x.shape()));
    return normalize_dim(dim, x.dim());
  };
  const std::int64_t s = checked_dim("scatter_dim", scatter_dim), g = checked_dim("gather_dim", gather_dim);
  WF_CHECK(s != g, "parallel::all_to_all_dims on group '{}': scatter_dim {} and gather_dim {} are the same dim of shape {}",
           group.name(), scatter_dim, gather_dim, shape_str(x.shape()));
  WF_CHECK(x.size(s) % group.size() == 0,
           "parallel::all_to_all_dims on group '{}': scatter dim {} of shape {} has extent {}, not divisible by the {} "
           "ranks of the group",
           group.name(), scatter_dim, shape_str(x.shape()), x.size(s), group.size());
  // The inverse re-sharding swaps the roles of the two dims; it is also the adjoint, because
  // the map only moves elements.
  return differentiable(
      "all_to_all_dims", group, x, [s, g](Group& grp, const Tensor& t) { return reshard(grp, t, s, g); },
      [s, g](Group& grp, const Tensor& t) { return reshard(grp, t, g, s); });
}

}  // namespace wf::parallel

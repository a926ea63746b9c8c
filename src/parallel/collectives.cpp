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

// The [outer, k, inner] view of t around dim d (k = t.size(d)): the dims before d, d itself
// and the dims after it, so that one slice of dim d is rows of a 3-d tensor.
struct AroundDim {
  std::int64_t outer = 1, k = 1, inner = 1;
  AroundDim(const Tensor& t, std::int64_t d) : k(t.size(d)) {
    for (std::int64_t i = 0; i < d; ++i) outer *= t.size(i);
    for (std::int64_t i = d + 1; i < t.dim(); ++i) inner *= t.size(i);
  }
};

// This rank's slice of dim d (forward of scatter_dim, backward of gather_dim).
Tensor own_slice(Group& group, const Tensor& t, std::int64_t d) {
  const std::int64_t k = t.size(d) / group.size();
  return narrow(t, d, group.rank() * k, k);
}

// all-gather along dim d: gather rows of the [outer, k, inner] view (rank-major), then move the
// rank index next to dim d, [P, outer, k, inner] → [outer, P, k, inner] → d of extent P·k.
Tensor gather_along(Group& group, const Tensor& t, std::int64_t d) {
  const std::int64_t P = group.size();
  const AroundDim v(t, d);
  const Tensor gathered = group.all_gather(reshape(t, {v.outer, v.k, v.inner}));
  Shape out = t.shape();
  out[static_cast<std::size_t>(d)] = P * v.k;
  if (P == 1 || v.outer == 1) return reshape(gathered, out);  // rank-major is already d-major
  return reshape(permute(reshape(gathered, {P, v.outer, v.k, v.inner}), {1, 0, 2, 3}), out);
}

// reduce-scatter (sum) along dim d, the adjoint of gather_along: bring rank r's slice of d to
// the front as contiguous rows ([outer, P, k, inner] → [P, outer, k, inner]), reduce-scatter
// the rows, and give back this rank's [outer, k, inner] with d of extent k.
Tensor sum_scatter_along(Group& group, const Tensor& t, std::int64_t d) {
  const std::int64_t P = group.size();
  const AroundDim v(t, d);
  const std::int64_t k = v.k / P;
  const Tensor blocks = reshape(t, {v.outer, P, k, v.inner});
  const Tensor send = P == 1 || v.outer == 1 ? blocks : permute(blocks, {1, 0, 2, 3});
  const Tensor mine = group.reduce_scatter(reshape(send, {P * v.outer, k, v.inner}), ReduceOp::sum);
  Shape out = t.shape();
  out[static_cast<std::size_t>(d)] = k;
  return reshape(mine, out);
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

// `dim` of x normalised, after checking (on every rank alike, before any traffic) that x is
// defined, the dim exists and, where the collective splits it, divides over the group.
std::int64_t checked_split_dim(const char* name, Group& group, const Tensor& x, std::int64_t dim, bool must_divide) {
  WF_CHECK(x.defined() && x.dim() >= 1, "parallel::{} on group '{}': the input must be a defined tensor with at least "
           "one dimension, got {}", name, group.name(), x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  WF_CHECK(dim >= -x.dim() && dim < x.dim(), "parallel::{} on group '{}': dim {} is out of range for shape {}", name,
           group.name(), dim, shape_str(x.shape()));
  const std::int64_t d = normalize_dim(dim, x.dim());
  WF_CHECK(!must_divide || x.size(d) % group.size() == 0,
           "parallel::{} on group '{}': dim {} of shape {} has extent {}, which does not split into {} equal slices",
           name, group.name(), dim, shape_str(x.shape()), x.size(d), group.size());
  return d;
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

Tensor scatter_dim(Group& group, const Tensor& x, std::int64_t dim) {
  const std::int64_t d = checked_split_dim("scatter_dim", group, x, dim, /*must_divide=*/true);
  return differentiable(
      "scatter_dim", group, x, [d](Group& g, const Tensor& t) { return own_slice(g, t, d); },
      [d](Group& g, const Tensor& t) { return gather_along(g, t, d); });
}

Tensor gather_dim(Group& group, const Tensor& x, std::int64_t dim) {
  const std::int64_t d = checked_split_dim("gather_dim", group, x, dim, /*must_divide=*/false);
  return differentiable(
      "gather_dim", group, x, [d](Group& g, const Tensor& t) { return gather_along(g, t, d); },
      [d](Group& g, const Tensor& t) { return own_slice(g, t, d); });
}

Tensor all_gather_dim(Group& group, const Tensor& x, std::int64_t dim) {
  const std::int64_t d = checked_split_dim("all_gather_dim", group, x, dim, /*must_divide=*/false);
  return differentiable(
      "all_gather_dim", group, x, [d](Group& g, const Tensor& t) { return gather_along(g, t, d); },
      [d](Group& g, const Tensor& t) { return sum_scatter_along(g, t, d); });
}

Tensor reduce_scatter_dim(Group& group, const Tensor& x, std::int64_t dim) {
  const std::int64_t d = checked_split_dim("reduce_scatter_dim", group, x, dim, /*must_divide=*/true);
  return differentiable(
      "reduce_scatter_dim", group, x, [d](Group& g, const Tensor& t) { return sum_scatter_along(g, t, d); },
      [d](Group& g, const Tensor& t) { return gather_along(g, t, d); });
}

Tensor scatter_last_dim(Group& group, const Tensor& x) { return scatter_dim(group, x, -1); }

Tensor gather_last_dim(Group& group, const Tensor& x) { return gather_dim(group, x, -1); }

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

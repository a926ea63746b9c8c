#pragma once
// Autograd-aware collectives: the communication steps of tensor and sequence parallel models,
// written as differentiable functions whose backward is the adjoint collective. Each is one
// wf::autograd::apply_function node; the forward runs the Group primitive (so traffic is
// counted under the group's name), the backward runs one collective on the gradient.
//
// The gradient convention (Megatron-LM's): the loss of the whole job is the SUM of the ranks'
// local losses, and every rank must backpropagate through the same collective nodes in the same
// order (their backward passes are collectives too). A tensor that is "replicated" holds the
// same value on every rank of the group and is counted ONCE in that sum: code downstream of it
// computes the same thing on every rank.
//
//   function        forward                      backward (of the gradient g)
//   all_gather      all-gather along dim 0       reduce-scatter (sum) along dim 0
//   reduce_scatter  reduce-scatter (sum), dim 0  all-gather along dim 0
//   all_reduce      all-reduce (sum)             identity   (Megatron's g; output replicated)
//   copy_to_group   identity                     all-reduce (Megatron's f; input replicated)
//   all_to_all      all-to-all along dim 0       the same all-to-all (it is its own inverse)
//   scatter_dim     keep this rank's slice of    all-gather along dim
//                   dim (no traffic)
//   gather_dim      all-gather along dim          keep this rank's slice (no traffic)
//                   (output replicated)
//   all_gather_dim  all-gather along dim          reduce-scatter (sum) along dim
//   reduce_scatter_dim  reduce-scatter (sum)      all-gather along dim
//                   along dim
//   scatter_last_dim / gather_last_dim: scatter_dim / gather_dim of the last dim
//   all_to_all_dims scatter one dim, gather one  all_to_all_dims with the two dims swapped
//
// Why each backward is right: a collective is a fixed linear map of the ranks' tensors, and the
// gradient flows through its adjoint. all-gather and reduce-scatter (sum) are adjoint to each
// other. An all-to-all with equal splits only permutes blocks between ranks (rank j's output
// block i is rank i's input block j), so its adjoint is its inverse, which is the same
// all-to-all. scatter_dim and gather_dim are the two directions between a replicated tensor
// and its equal slices: slicing a replicated input hands each rank's part of the loss to
// one slice, so the input's gradient is the slices' gradients put back together; a gathered
// output is replicated and counted once, so each slice's gradient is its part of the output's.
// all_reduce and copy_to_group are the two halves of a replicated region:
// all_reduce's output is replicated, so the loss counts it once and each input's gradient is the
// (replicated) output gradient; copy_to_group's input is replicated and each rank's use of it
// contributes to the loss, so its gradient is the sum over ranks.
//
// gather_dim and all_gather_dim have the same forward and differ in what the output is: gather_dim's
// is replicated (counted once, whoever uses it uses it alike), all_gather_dim's feeds a different
// computation on each rank (a column-parallel layer's own rows of the weight), so every rank's
// gradient of it is a partial one and the input's gradient is their sum, reduce-scattered.
//
// The group is held by reference in the graph: it must outlive the backward pass.
#include <cstdint>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"

namespace wf::parallel {

// x [n, ...] on every rank → [size·n, ...], rank r's x at rows [r·n, (r+1)·n).
Tensor all_gather(comm::Group& group, const Tensor& x);
// x [size·n, ...] → [n, ...]: rows [r·n, (r+1)·n) of the sum over ranks, on rank r.
Tensor reduce_scatter(comm::Group& group, const Tensor& x);
// Sum over the group's ranks; the output is replicated (backward: identity).
Tensor all_reduce(comm::Group& group, const Tensor& x);
// Identity on a replicated input; backward sums the gradient over the group.
Tensor copy_to_group(comm::Group& group, const Tensor& x);
// x [size·n, ...] → [size·n, ...]: block i (rows [i·n, (i+1)·n)) goes to rank i; output block i
// came from rank i.
Tensor all_to_all(comm::Group& group, const Tensor& x);

// x replicated, extent size·k along `dim` (negative: from the end) → this rank's slice
// [r·k, (r+1)·k) of it. wf::Error naming the sizes unless the extent divides over the group.
Tensor scatter_dim(comm::Group& group, const Tensor& x, std::int64_t dim);
// x of extent k along `dim` on every rank → extent size·k, rank r's x at [r·k, (r+1)·k);
// the output is replicated (backward keeps this rank's slice of the gradient).
Tensor gather_dim(comm::Group& group, const Tensor& x, std::int64_t dim);
// The same forward as gather_dim, for an output every rank uses differently: the backward sums
// the ranks' gradients and gives each its slice (reduce-scatter along `dim`).
Tensor all_gather_dim(comm::Group& group, const Tensor& x, std::int64_t dim);
// x of extent size·k along `dim` on every rank → extent k: slice r of the sum over ranks, on
// rank r. Backward: all-gather along `dim`. wf::Error naming the sizes unless it divides.
Tensor reduce_scatter_dim(comm::Group& group, const Tensor& x, std::int64_t dim);

// scatter_dim / gather_dim of the last dim: [..., size·k] replicated → [..., k], rank r's
// columns [r·k, (r+1)·k); and [..., k] on every rank → [..., size·k] replicated.
Tensor scatter_last_dim(comm::Group& group, const Tensor& x);
Tensor gather_last_dim(comm::Group& group, const Tensor& x);

// Re-shards x from `gather_dim` to `scatter_dim`: every rank holds a slice of a global tensor
// along gather_dim (rank order); afterwards every rank holds the whole of gather_dim and the
// r-th of `size` equal slices of scatter_dim. For Ulysses sequence parallelism,
//   all_to_all_dims(group, q, /*scatter_dim=*/2, /*gather_dim=*/1)
// turns a sequence-sharded q [B, n/P, h, d] into a head-sharded [B, n, h/P, d], and
//   all_to_all_dims(group, o, /*scatter_dim=*/1, /*gather_dim=*/2)
// turns it back. Needs x.size(scatter_dim) divisible by the group size and the two dims
// distinct; negative dims count from the end. Backward: the inverse re-sharding.
Tensor all_to_all_dims(comm::Group& group, const Tensor& x, std::int64_t scatter_dim, std::int64_t gather_dim);

}  // namespace wf::parallel

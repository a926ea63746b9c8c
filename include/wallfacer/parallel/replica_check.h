#pragma once
// The debug check that a parameter tensor parallelism replicates is still one tensor: after an
// optimizer step every tp rank must hold the same copy of each whole (not split) parameter. A
// parameter whose gradient each rank computes only in part (a norm over split heads, QK-norm)
// but that was declared like a plain norm gets no sum over tp, so its copies drift apart by a
// little each step, silently. train.check_replicas runs this after every step (the parity tests
// turn it on); it costs two all-reduces of the replicated parameters per step.
#include "wallfacer/comm/group.h"
#include "wallfacer/nn/module.h"

namespace wf::parallel {

// Compares every whole parameter of `module` over `tp` (collective: every tp rank calls it, and
// all of them throw alike): wf::Error naming each parameter whose copies differ by more than a
// few roundings of its dtype, relative to its largest entry, with how far, and the likely fix
// (declare its role: LayerFactory::norm(..., ActivationRegion::split) for a norm over split
// heads). Returns how many parameters it compared; 0 and no traffic on a group of one.
int check_tp_replicas(const nn::Module& module, comm::Group& tp);

}  // namespace wf::parallel

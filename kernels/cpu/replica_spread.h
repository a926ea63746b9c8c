#pragma once
// The tensor-parallel replica check's per-parameter numbers (parallel/replica_check.h), from the
// all-reduced extremes of the replicated parameters laid end to end.
#include <cstdint>
#include <vector>

namespace wf::kernels::cpu {

// Parameter p holds elements [ends[p − 1], ends[p]) (from 0) of the n values. extremes [2n] is
// max over the ranks of w, then of −w; own [n] is this rank's w. Writes out[2p] = the largest
// max − min over the ranks of p's elements and out[2p + 1] = its largest |own| (both from 0,
// accumulated with std::max, so NaN elements are passed over as the check always has).
void replica_spread(std::int64_t n, const std::vector<std::int64_t>& ends, const double* extremes, const double* own,
                    double* out);

}  // namespace wf::kernels::cpu

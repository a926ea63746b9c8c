#pragma once
// `wallfacer bench kernels --linear-ce`: the output head fused with its cross-entropy in chunks of
// rows (linear_cross_entropy_sum) against linear, the cast and cross_entropy_sum, forward + backward.

namespace wf::cli {

// Prints the median ms and the peak bytes allocated above the inputs of each, and the ratios;
// returns the exit code.
int run_linear_ce_bench(int iters, bool quick);

}  // namespace wf::cli

#pragma once
// `wallfacer bench kernels --linear-add`: the residual add inside the projection (linear_add: one
// backend entry, the GEMM's epilogue where a backend fuses it) against linear() followed by add(),
// forward + backward.

namespace wf::cli {

// Prints one line per bias setting (median ms of each, unfused / fused ratio); returns the exit code.
int run_linear_add_bench(int iters, bool quick);

}  // namespace wf::cli

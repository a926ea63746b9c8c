#pragma once
// `wallfacer bench kernels --add-norm`: the residual add fused into LayerNorm / RMSNorm
// (add_layer_norm, add_rms_norm) against add() followed by the norm, forward + backward.

namespace wf::cli {

// Prints one line per norm (median ms of each, unfused / fused ratio); returns the exit code.
int run_add_norm_bench(int iters, bool quick);

}  // namespace wf::cli

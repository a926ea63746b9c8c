#pragma once
// `wallfacer bench kernels --qkv-rope`: the fused QKV split + RoPE (split_qkv_rope) against the
// composition it replaced (narrow + reshape + rope), forward + backward.

namespace wf::cli {

// Prints the shape, the median ms of each and the composed / fused ratio; returns the exit code.
int run_qkv_rope_bench(int iters, bool quick);

}  // namespace wf::cli

#pragma once
// What the CUDA kernel backend is made of, for `wallfacer info` (CUDA builds only). Free of CUDA's
// headers: the CLI includes it without the toolkit's include path.
#include <string>
#include <vector>

namespace wf::kernels::cuda {

// One line per area of kernels/cuda: its file and how it computes ("attention: flash-attention
// forward/backward (SIMT f32/f64; bf16 forward on tensor cores, WMMA)").
std::vector<std::string> cuda_kernel_inventory();

}  // namespace wf::kernels::cuda

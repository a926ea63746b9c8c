#pragma once
// Sample grids: a batch of images written as one PNG, to look at what a diffusion model draws.
#include <cstdint>
#include <string>

#include "wallfacer/core/tensor.h"

namespace wf::data {

// Writes images [N, C, H, W] (C = 1: 8-bit grayscale PNG, C = 3: 8-bit RGB; values in [-1, 1],
// any floating dtype, any device) as a grid of `columns` images per row (0: ceil(sqrt(N))) with
// `padding` black pixels between and around them: the PNG is columns·(W + padding) + padding
// wide and rows·(H + padding) + padding high, rows = ceil(N / columns), unused cells black.
// A value x becomes round((clamp(x, -1, 1) + 1) · 127.5); NaN becomes 0 (black).
//
// Written atomically: into a temporary file in the same directory, synced, then renamed onto
// `path`, so a reader never sees half a PNG. A directory that does not exist, is not a
// directory or cannot be written is a wf::UserError naming it; so are bad shapes and arguments.
void write_png_grid(const std::string& path, const Tensor& images, std::int64_t columns = 0,
                    std::int64_t padding = 2);

}  // namespace wf::data

#pragma once
// Fixed sin-cos position embeddings for patch sequences (ViT / MAE / DiT), as constant f32
// tables computed in f64:
//
//   1-D, dim channels at positions p:  ω_k = 1 / 10000^(k / (dim/2)), k < dim/2;
//                                      e(p) = [sin(p·ω_0 …), cos(p·ω_0 …)]   (sin first)
//   2-D, grid rows × cols, patch n = r·cols + c (row-major):
//                                      e(n) = [e_{dim/2}(c), e_{dim/2}(r)]  (column first, as
//                                      MAE's get_2d_sincos_pos_embed, which DiT uses)
//   3-D (video, frames × rows × cols, patch n = (f·rows + r)·cols + c):
//                                      e(n) = e_2d(r, c) + e_1d(f)  (a temporal embedding added to
//                                      every frame's spatial one, as Latte does)
// A sequence-parallel rank takes the rows of its patches' global indices (select_positions).
#include <cstdint>

#include "wallfacer/core/tensor.h"

namespace wf::nn {

// [positions.numel(), dim] f32: the 1-D embedding at each position (i64). dim must be even.
Tensor sincos_1d(std::int64_t dim, const Tensor& positions);
// [rows·cols, dim] f32. dim must be a multiple of 4.
Tensor sincos_2d(std::int64_t dim, std::int64_t rows, std::int64_t cols);
// [frames·rows·cols, dim] f32; frames = 1 is exactly sincos_2d. dim must be a multiple of 4.
Tensor sincos_3d(std::int64_t dim, std::int64_t frames, std::int64_t rows, std::int64_t cols);

// Rows `positions` [n] (i64, each in [0, N)) along dim −2 of x [..., N, d] → [..., n, d], for
// every leading index (not differentiable; x must not require grad): a table's rows, or a
// batch's tokens at a rank's positions.
Tensor select_rows(const Tensor& x, const Tensor& positions);

}  // namespace wf::nn

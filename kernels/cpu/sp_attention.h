#pragma once
// CPU kernels of sequence-parallel attention (src/parallel): WallFacer's combine of the team
// members' partial log-sum-exps, the rescale of their partial outputs, the backward's
// −D = d_lse − rowsum(dO∘O), and the block copies of the Ulysses all-to-all message. Each has a
// plain `_reference` beside it (double arithmetic, the obvious loop) that tests/kernels/
// test_sp_attention.cpp compares it with.
//
// Layouts as kernels/kernel_args.h's attention: o, d_o [B, n, h, d] and lse, weight [B, h, n].
#include <cstdint>

#include "kernels/sp_kernel_args.h"

namespace wf::kernels::cpu {

// From the members' partial lse over the same rows, all [members, rows] (member-major):
// lse_star[r] = log Σ_c exp(all[c, r]) (max-shifted, summed in member order, so every member
// gets the same bits) and weight[r] = exp(all[member, r] − lse_star[r]), the factor that turns
// `member`'s partial output into its share of the final one. A row no member saw (every partial
// −inf) gets lse_star −inf and weight 0, with no NaN.
template <class T>
void team_lse_combine(int members, std::int64_t rows, int member, const T* all, T* lse_star, T* weight);
template <class T>
void team_lse_combine_reference(int members, std::int64_t rows, int member, const T* all, double* lse_star,
                                double* weight);

// o[b, i, head, :] *= weight[b, head, i], in place.
template <class T>
void scale_attention_rows(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, T* o, const T* weight);
template <class T>
void scale_attention_rows_reference(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, const T* o,
                                    const T* weight, double* out);

// out[b, head, i] = d_lse[b, head, i] − Σ_e d_o[b, i, head, e]·o[b, i, head, e]: the negated
// D of attention's backward with the gradient arriving at lse folded in (d_lse nullable: 0).
template <class T>
void attention_minus_delta(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, const T* d_o, const T* o,
                           const T* d_lse, T* out);
template <class T>
void attention_minus_delta_reference(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, const T* d_o,
                                     const T* o, const T* d_lse, double* out);

// Copies one tensor's block of a Ulysses message (kernels/sp_kernel_args.h) between `tensor`
// and `message` (the block's first byte), as block.move says: each element is converted to the
// destination's dtype (exact when widening; rounded to nearest even when narrowing, f32 → bf16
// directly, anything else through double), then written or, for unpack_add, added in the
// tensor's dtype. wf::Error for dtypes other than f32, f64, bf16, or an add into bf16.
void ulysses_block(const UlyssesBlock& block, void* tensor, void* message);
void ulysses_block_reference(const UlyssesBlock& block, void* tensor, void* message);

}  // namespace wf::kernels::cpu

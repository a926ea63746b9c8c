#pragma once
// Ulysses' head rule, shared by the strategy (src/parallel/ulysses_attention.cpp), its traffic
// formula, the attention benchmark and the config validation.
//
// Rank r of the P sp ranks attends with query heads [r·h/P, (r+1)·h/P), so P must divide h. Its
// kv heads are the ones those query heads read under GQA (query head i reads kv head
// i / (h/h_kv)): h_kv/P of them when P divides h_kv, or the single kv head r / (P/h_kv) when
// h_kv divides P; the P/h_kv ranks sharing that head each receive a copy (replication, as in
// DeepSpeed-Ulysses and USP). Any other h_kv would split a rank's query heads over a fraction
// of a kv head.
#include <cstdint>
#include <string>

namespace wf::parallel {

// "" when Ulysses runs h query heads and h_kv kv heads over P ranks: P | h, h_kv | h, and
// P | h_kv or h_kv | P. Otherwise why not, naming the sp sizes that work with these heads and
// the kv head counts that work with h at this P.
std::string ulysses_heads_problem(std::int64_t h, std::int64_t h_kv, int P);

// The kv heads each Ulysses rank holds: h_kv/P, or 1 (a copy) when h_kv < P.
std::int64_t ulysses_kv_heads_per_rank(std::int64_t h_kv, int P);

}  // namespace wf::parallel

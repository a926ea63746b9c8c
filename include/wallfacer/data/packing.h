#pragma once
// Packed documents (docs/data.md "Packed documents"): a sequence is a window of the token
// stream, the documents in it are cut where it starts and ends, and each token's position
// restarts at 0 at each document start and at the window's start.
#include <cstdint>
#include <vector>

#include "wallfacer/data/document_index.h"

namespace wf::data {

// The document boundaries of the window [window_start, window_start + N) as cumulative sequence
// lengths (THD's cu_seqlens): 0, then every document start inside the window relative to it, then
// N. A document that began before the window is cut at 0; one that goes on past it at N.
std::vector<std::int64_t> window_document_bounds(const DocumentIndex& index, std::int64_t window_start,
                                                 std::int64_t N);

// Each position's place inside its document: out[i] = positions[i] − the last bound ≤
// positions[i]. `bounds` as window_document_bounds gives them; positions in [0, bounds.back()).
void document_positions(const std::vector<std::int64_t>& bounds, const std::vector<std::int64_t>& positions,
                        std::int64_t* out);

}  // namespace wf::data

// Packed documents (data/packing.h): the boundaries of a window and positions inside documents.
#include "wallfacer/data/packing.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wf::data {

std::vector<std::int64_t> window_document_bounds(const DocumentIndex& index, std::int64_t window_start,
                                                 std::int64_t N) {
  std::vector<std::int64_t> bounds{0};
  // The first document that starts after the window's first token (binary search: O(log D)).
  for (auto it = std::upper_bound(index.starts.begin(), index.starts.end(), window_start);
       it != index.starts.end() && *it < window_start + N; ++it) {
    bounds.push_back(*it - window_start);
  }
  bounds.push_back(N);
  return bounds;
}

void document_positions(const std::vector<std::int64_t>& bounds, const std::vector<std::int64_t>& positions,
                        std::int64_t* out) {
  WF_CHECK(bounds.size() >= 2 && bounds.front() == 0, "document_positions: bounds must run from 0 to N");
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const std::int64_t p = positions[i];
    WF_CHECK(p >= 0 && p < bounds.back(), "document_positions: position {} is outside [0, {})", p, bounds.back());
    out[i] = p - *(std::upper_bound(bounds.begin(), bounds.end(), p) - 1);
  }
}

}  // namespace wf::data

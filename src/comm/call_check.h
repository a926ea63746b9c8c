#pragma once
// Argument agreement for collectives. MPI only notices some mismatches (and then often as a
// hang or a truncation deep inside a collective); this exchanges a small header per call —
// primitive, dtype, shape, reduce op / root / row counts, and the group's call sequence
// number — and raises one clear wf::Error on every rank when any rank disagrees with rank 0.
// For all_gather_v dim 0 may differ between ranks; the list of row counts may not.
//
// A rank whose own checks of its arguments failed (an undefined or wrongly shaped tensor, a
// bad root) still takes part in the exchange, with its error in place of the signature: then
// every rank throws the same wf::Error, carrying that rank's message, instead of the others
// waiting inside the collective for the watchdog.
#include <cstdint>
#include <string>

#include "wallfacer/comm/backend.h"
#include "wallfacer/core/shape.h"

namespace wf::comm {

struct CallSignature {
  const char* primitive;         // "all_reduce", "all_gather_v", "barrier", ...
  DType dtype = DType::f32;
  const Shape* shape = nullptr;  // null for barrier
  std::int64_t detail = -1;      // reduce op, broadcast root, hash of all_gather_v's row counts
  const std::string* local_error = nullptr;  // this rank's failed local check (then shape is ignored)
};

// Collective over the group of `backend` (an uncounted all-gather of one header per rank).
// Every rank compares the same table, so every rank throws the same mismatch.
void check_call_agreement(Backend& backend, const std::string& group, std::int64_t sequence,
                          const CallSignature& call);

// FNV-1a over 64-bit values: shapes and row-count lists travel as one word.
std::uint64_t hash_values(const std::int64_t* values, std::size_t count);

}  // namespace wf::comm

// Fuzzes the document-index reader (data::read_document_index, the .docs file beside a token
// file): the header (magic, version, end-of-text token, token and document counts) against the
// file size, then the starts. An accepted index must keep the documented rules (the first start
// 0, strictly increasing, each below the token count), hold exactly the fields its bytes hold
// (decoded here independently, by the layout of docs/data.md), and give the loader's window
// bounds from 0 to N, increasing, and positions inside documents in range. (No write-back: the
// writer syncs to disk, which would make the disk, not the reader, the fuzzer's pace.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/data/packing.h"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "document_index fuzz: %s\n", what);
  std::abort();
}

std::uint64_t u64_at(const std::uint8_t* data, std::size_t offset) {
  std::uint64_t value = 0;
  std::memcpy(&value, data + offset, sizeof(value));  // little-endian host, as the reader
  return value;
}

void check_window(const wf::data::DocumentIndex& index, std::int64_t window_start, std::int64_t N) {
  const std::vector<std::int64_t> bounds = wf::data::window_document_bounds(index, window_start, N);
  if (bounds.front() != 0 || bounds.back() != N) broken("window bounds do not run from 0 to N");
  if (std::adjacent_find(bounds.begin(), bounds.end(), std::greater_equal<>()) != bounds.end()) {
    broken("window bounds are not increasing");
  }
  std::vector<std::int64_t> positions(static_cast<std::size_t>(N)), inside(positions.size());
  for (std::int64_t p = 0; p < N; ++p) positions[static_cast<std::size_t>(p)] = p;
  wf::data::document_positions(bounds, positions, inside.data());
  for (std::int64_t p = 0; p < N; ++p) {
    const std::int64_t q = inside[static_cast<std::size_t>(p)];
    if (q < 0 || q > p) broken("a position inside its document is out of range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (wf::fuzz::scratch_dir() / "input.docs").string();
  wf::fuzz::write_file(path, wf::fuzz::input(data, size));
  wf::fuzz::refusing_only_with_wf_error([&] {
    const wf::data::DocumentIndex index = wf::data::read_document_index(path);
    const std::int64_t D = index.documents();
    for (std::int64_t d = 0; d < D; ++d) {
      const std::int64_t start = index.starts[static_cast<std::size_t>(d)];
      if ((d == 0 && start != 0) || (d > 0 && start <= index.starts[static_cast<std::size_t>(d - 1)]) ||
          start >= index.token_count) {
        broken("an accepted index breaks the rules of its starts");
      }
    }
    const auto count = static_cast<std::size_t>(D);
    if (size != 32 + 8 * count || u64_at(data, 16) != static_cast<std::uint64_t>(index.token_count) ||
        u64_at(data, 24) != count) {
      broken("an accepted index is not the size or the counts its header says");
    }
    for (std::size_t d = 0; d < count; ++d) {
      if (u64_at(data, 32 + 8 * d) != static_cast<std::uint64_t>(index.starts[d])) {
        broken("an accepted index's starts are not the file's");
      }
    }
    if (index.token_count == 0) return;
    const std::int64_t N = 1 + index.token_count % 64;  // windows as the loader cuts them
    check_window(index, 0, std::min(N, index.token_count));
    check_window(index, index.token_count / 2, N);
  });
  return 0;
}

// Fuzzes the token-file reader behind data::open_token_file_source: the header (magic, version,
// token width, count) against the file size, then reads every token of an accepted file, so a
// count that promises more than the mapping holds shows up as an ASan report.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/data/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (wf::fuzz::scratch_dir() / "input.bin").string();
  wf::fuzz::write_file(path, wf::fuzz::input(data, size));
  wf::fuzz::refusing_only_with_wf_error([&] {
    const auto source = wf::data::open_token_file_source(path);
    // In chunks, as the batch loader reads: the same bounds checks, and bounded memory.
    constexpr std::int64_t kChunk = 4096;
    std::vector<std::int64_t> tokens(kChunk);
    for (std::int64_t start = 0; start < source->size(); start += kChunk) {
      source->read(start, std::min(kChunk, source->size() - start), tokens.data());
    }
    // Past the end is refused, never read.
    wf::fuzz::refusing_only_with_wf_error([&] { source->read(source->size(), 1, tokens.data()); });
  });
  return 0;
}

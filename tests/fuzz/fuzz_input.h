#pragma once
// What every fuzz target shares: the scratch directory the parsers that read paths are given
// their input in, and the rule for what counts as a finding.
//
// A parser under fuzz may refuse its input only with wf::Error (the documented way every reader
// reports a bad file). Anything else that escapes — a std::exception from a library underneath,
// an out_of_range from a missed check — is left to propagate: libFuzzer reports the uncaught
// exception (std::terminate, abort) as a crash and saves the input.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "wallfacer/core/error.h"

namespace wf::fuzz {

// A directory private to this process (mkdtemp under $TMPDIR, or /tmp), created on first use
// and removed at exit. Targets reuse the same paths in it for every input: creating a file per
// input would make the file system, not the parser, the bottleneck.
const std::filesystem::path& scratch_dir();

// Replaces the contents of `path` with `bytes` (creating it). Aborts on an I/O error: that is
// the harness failing, not the parser, and must not pass as a "refused input".
void write_file(const std::filesystem::path& path, std::span<const std::uint8_t> bytes);
void write_file(const std::filesystem::path& path, std::string_view text);

// The fuzz input as bytes (libFuzzer's (data, size) pair).
inline std::span<const std::uint8_t> input(const std::uint8_t* data, std::size_t size) { return {data, size}; }

// Runs `parse`, treating a wf::Error (the input refused, with a message) as a normal outcome.
template <typename F>
void refusing_only_with_wf_error(F&& parse) {
  try {
    parse();
  } catch (const wf::Error&) {
    // The parser said what is wrong with the input: exactly what it should do.
  }
}

}  // namespace wf::fuzz

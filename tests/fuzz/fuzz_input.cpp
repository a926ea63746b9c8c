#include "tests/fuzz/fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>

namespace wf::fuzz {
namespace {

[[noreturn]] void harness_failure(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s\n", what.c_str());
  std::abort();
}

// Owns the directory; the static in scratch_dir() destroys it at exit (libFuzzer exits through
// exit() after -max_total_time, so the destructor runs). WF_FUZZ_KEEP_SCRATCH=1 keeps it, to look
// at what a target wrote there (docs/fuzzing.md: refreshing the checkpoint seed).
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/wf-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) harness_failure("cannot create a scratch directory " + pattern);
    path = pattern;
  }
  ~ScratchDir() {
    if (std::getenv("WF_FUZZ_KEEP_SCRATCH") != nullptr) {
      std::fprintf(stderr, "fuzz harness: kept %s\n", path.c_str());
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace

const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

void write_file(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) harness_failure("cannot write " + path.string());
}

void write_file(const std::filesystem::path& path, std::string_view text) {
  write_file(path, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

}  // namespace wf::fuzz

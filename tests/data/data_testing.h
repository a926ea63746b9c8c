#pragma once
// Helpers shared by the data tests: a scratch directory that cleans up after itself, files raw
// and gzipped, and the GPT-2 vocabulary directory (WF_GPT2_DIR, set by tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace wf::data::testing {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("wf_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // The names of the entries in the directory, to catch leftover temporary files.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename());
    return names;
  }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Writes `bytes` gzip-compressed, as the Fashion-MNIST downloads and many JSON Lines datasets are.
inline void write_gz(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The directory with encoder.json and vocab.bpe, or "" when they are not there.
inline std::string gpt2_dir() {
  const char* env = std::getenv("WF_GPT2_DIR");
  const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : "data/gpt2";
  std::error_code ec;
  if (!std::filesystem::exists(dir / "encoder.json", ec) || !std::filesystem::exists(dir / "vocab.bpe", ec)) return "";
  return dir.string();
}

}  // namespace wf::data::testing

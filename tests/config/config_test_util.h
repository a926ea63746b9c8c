#pragma once
// Helpers for the config tests: YAML text written to a temporary file, and the message of the
// wf::Error an expression throws.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "wallfacer/core/error.h"

namespace wf::config::test {

// A file under a per-process temporary folder, removed when the object goes.
class TempYaml {
 public:
  TempYaml(const std::string& name, const std::string& text)
      : path_(std::filesystem::temp_directory_path() / ("wf_config_test_" + std::to_string(::getpid())) / name) {
    std::filesystem::create_directories(path_.parent_path());
    std::ofstream(path_) << text;
  }
  ~TempYaml() {
    std::error_code ignored;  // the folder stays while another TempYaml still uses it
    std::filesystem::remove(path_, ignored);
    std::filesystem::remove(path_.parent_path(), ignored);
  }
  TempYaml(const TempYaml&) = delete;
  TempYaml& operator=(const TempYaml&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The wf::Error message `body` throws, or "" when it throws nothing.
inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace wf::config::test

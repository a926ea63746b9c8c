#pragma once
// Helpers for the config tests: YAML text written to a temporary file, the message of the
// wf::Error an expression throws, and readable data files for validate.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "wallfacer/config/run_config.h"
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

// validate (this_machine) refuses data files this machine cannot read, as train would. A test of
// the config's own rules points them at `path`, a readable file: data.train_path, and
// data.val_path when the config has one (an empty one is a rule of its own).
inline RunConfig with_data_file(RunConfig config, const std::string& path) {
  config.data.train_path = path;
  if (!config.data.val_path.empty()) config.data.val_path = path;
  return config;
}

}  // namespace wf::config::test

#include "wallfacer/train/output_dirs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "src/core/atomic_file.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/checkpoint.h"

namespace wf::train {

void check_writable_dir(std::string_view key, const std::string& dir) {
  const auto fix = [&] { return fmt::format("set {} to a directory this job can write", key); };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  WF_USER_CHECK(!ec, "{} = '{}': cannot create the directory: {}; {}", key, dir, ec.message(), fix());
  WF_USER_CHECK(std::filesystem::is_directory(dir, ec), "{} = '{}' is not a directory; {}", key, dir, fix());
  // A probe named by the pid: ranks sharing the directory on one filesystem do not collide.
  const std::string probe = (std::filesystem::path(dir) / fmt::format(".wf-write-probe-{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  WF_USER_CHECK(fd >= 0, "{} = '{}': cannot create a file in it: {}; {}", key, dir, wf::detail::errno_text(), fix());
  ::close(fd);
  WF_USER_CHECK(::unlink(probe.c_str()) == 0, "{} = '{}': cannot remove the probe file {}: {}; {}", key, dir, probe,
                wf::detail::errno_text(), fix());
}

void check_output_dirs(const config::RunConfig& config) {
  check_writable_dir("checkpoint.dir", config.checkpoint.dir);
  check_writable_dir("log.dir", config.log.dir);
}

void check_no_checkpoints(const std::string& dir) {
  const std::vector<std::string> existing = CheckpointStore(dir, 0).list();
  if (existing.empty()) return;
  // list() holds only step-<digits> directories, oldest step first.
  const std::string newest = std::filesystem::path(existing.back()).filename().string();
  const std::int64_t step = std::stoll(newest.substr(newest.find('-') + 1));
  WF_USER_FAIL(
      "checkpoint.dir = '{}' already holds {} checkpoint{} (the newest at step {}, {}), and --no-resume starts a "
      "new run at step 0 whose checkpoints would mix with them (pruning to keep_last would keep the newer, stale "
      "steps, and a later resume would continue from them); point checkpoint.dir at another directory (--set "
      "checkpoint.dir=...), delete them (rm -r '{}'/step-*), or drop --no-resume to continue from step {}",
      dir, existing.size(), existing.size() == 1 ? "" : "s", step, existing.back(), dir, step);
}

}  // namespace wf::train

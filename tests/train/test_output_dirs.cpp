// check_output_dirs: checkpoint.dir and log.dir are created and probed before training, and a
// path that cannot be written fails with the key, the path and the system's reason. The tests
// run as root, for whom permission bits stop nothing, so the unwritable paths lie under a
// regular file (no directory can be made there, whoever asks).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "data/data_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/output_dirs.h"

using Catch::Matchers::Contains;
using wf::data::testing::TempDir;
using wf::data::testing::write_bytes;

TEST_CASE("check_output_dirs creates both directories and leaves no probe behind", "[train][output_dirs]") {
  TempDir dir;
  wf::config::RunConfig config;
  config.checkpoint.dir = dir.file("run/checkpoints");
  config.log.dir = dir.file("run/logs");
  wf::train::check_output_dirs(config);
  CHECK(std::filesystem::is_directory(config.checkpoint.dir));
  CHECK(std::filesystem::is_empty(config.checkpoint.dir));
  CHECK(std::filesystem::is_empty(config.log.dir));
  wf::train::check_output_dirs(config);  // existing directories are fine
}

TEST_CASE("an unwritable checkpoint.dir or log.dir names the key, the path and the reason", "[train][output_dirs]") {
  TempDir dir;
  const std::string file = dir.file("a-file");
  write_bytes(file, "not a directory");
  wf::config::RunConfig config;
  config.checkpoint.dir = dir.file("checkpoints");
  config.log.dir = dir.file("logs");

  SECTION("checkpoint.dir under a regular file") {
    config.checkpoint.dir = file + "/checkpoints";
    CHECK_THROWS_WITH(wf::train::check_output_dirs(config),
                      Contains("checkpoint.dir = '" + config.checkpoint.dir + "': cannot create the directory") &&
                          Contains("Not a directory") && Contains("set checkpoint.dir to a directory"));
  }
  SECTION("log.dir is a regular file") {
    config.log.dir = file;
    CHECK_THROWS_WITH(wf::train::check_output_dirs(config),
                      Contains("log.dir = '" + file + "'") && Contains("set log.dir to a directory"));
  }
  SECTION("a directory where no file can be created (read-only /proc)") {
    CHECK_THROWS_WITH(wf::train::check_writable_dir("log.dir", "/proc/self"),
                      Contains("log.dir = '/proc/self': cannot create a file in it: "));
  }
  SECTION("the message carries no source location: it already names the key and the fix") {
    config.log.dir = file + "/logs";
    try {
      wf::train::check_output_dirs(config);
      FAIL("expected an error");
    } catch (const wf::UserError& e) {
      CHECK_THAT(e.what(), !Contains(".cpp:"));
    }
  }
}

TEST_CASE("a fresh start (--no-resume) into a directory that holds checkpoints is refused", "[train][output_dirs]") {
  TempDir dir;
  const std::string ckpt = dir.file("checkpoints");
  wf::train::check_no_checkpoints(ckpt);  // no directory yet
  std::filesystem::create_directories(ckpt + "/.tmp-step-00000040-1");  // a crashed save's leftovers
  std::filesystem::create_directories(ckpt + "/notes");
  wf::train::check_no_checkpoints(ckpt);  // no checkpoint among them

  wf::train::CheckpointStore store(ckpt, 0);
  wf::train::Checkpoint checkpoint;
  checkpoint.step = 30;
  store.save(checkpoint);
  CHECK_THROWS_WITH(wf::train::check_no_checkpoints(ckpt),
                    Contains("checkpoint.dir = '" + ckpt + "' already holds 1 checkpoint (the newest at step 30, " +
                             ckpt + "/step-00000030)") &&
                        Contains("--no-resume starts a new run at step 0"));
  checkpoint.step = 120;
  store.save(checkpoint);
  checkpoint.step = 5;
  store.save(checkpoint);
  try {
    wf::train::check_no_checkpoints(ckpt);
    FAIL("expected an error");
  } catch (const wf::UserError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Contains("already holds 3 checkpoints (the newest at step 120, " + ckpt + "/step-00000120)"));
    CHECK_THAT(message, Contains("point checkpoint.dir at another directory") &&
                            Contains("rm -r '" + ckpt + "'/step-*") &&
                            Contains("drop --no-resume to continue from step 120"));
    CHECK_THAT(message, !Contains(".cpp:"));
  }
  CHECK(store.list().size() == 3);  // refused, nothing touched
}

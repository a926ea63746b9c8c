#pragma once
// Training checkpoints: a directory per step holding the model and optimizer state as
// safetensors files and a manifest with everything else a resumed run needs.
//
//   <dir>/step-00000010/model.safetensors
//                      /optimizer.safetensors
//                      /manifest.json   format, version, step, config (YAML text), state map,
//                                       and each file's size and SHA-256
//
// A save is written into <dir>/.tmp-step-00000010-<pid>/, flushed to disk and renamed into place,
// so a crash leaves either the complete checkpoint or none. A truncated or corrupted one is
// detected on load by its checksums, and load_latest() then falls back to the previous one.
// docs/checkpoints.md describes the format.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/nn/state_dict.h"

namespace wf::train {

struct Checkpoint {
  std::int64_t step = 0;
  nn::StateDict model;
  nn::StateDict optimizer;
  std::string config_yaml;
  // RNG, data-loader position, anything else the trainer restores, as (UTF-8) strings.
  std::map<std::string, std::string> state;
};

// One writer per directory: save() removes any leftover .tmp-* entries it finds.
class CheckpointStore {
 public:
  // keep: how many checkpoints save() leaves (the newest by step); 0 keeps all.
  CheckpointStore(std::string dir, std::int64_t keep);

  // Writes `checkpoint` as <dir>/step-<step>, replacing one of the same step, then prunes to
  // `keep`. Returns the checkpoint's directory. wf::Error naming the path on failure, with the
  // existing checkpoints untouched.
  std::string save(const Checkpoint& checkpoint);

  // The newest checkpoint that loads; a corrupt or incomplete newer one is skipped with a
  // warning naming it and the error. nullopt when there is none.
  std::optional<Checkpoint> load_latest() const;

  // Verifies sizes and checksums, then loads. wf::Error naming the file, the expected and actual
  // checksum, and the fix when the checkpoint is corrupt.
  Checkpoint load(const std::string& checkpoint_dir) const;

  // Directories of the complete checkpoints (those with a manifest), oldest step first.
  std::vector<std::string> list() const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::int64_t keep_;
};

}  // namespace wf::train

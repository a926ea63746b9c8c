#pragma once
// Training checkpoints: a directory per step of a checkpoint directory, holding the training
// state as safetensors files and a manifest with everything else a resumed run needs.
//
// CheckpointStore owns the directory: which steps exist (list, find_latest with its fallback past
// damaged ones), pruning, and whole-tensor access for one process (load, and save: the format 3
// writer, kept for the compatibility tests). The trainer writes format 4, one file per rank
// (distributed_checkpoint.h); load() reads both formats through CheckpointReader.
//
// A save is written into <dir>/.tmp-step-00000010-<pid>/, flushed to disk and renamed into place,
// so a crash leaves either the complete checkpoint or none. A truncated or corrupted one is
// detected on load by its checksums, and load_latest() then falls back to the previous one.
// docs/checkpoints.md describes the format.
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/nn/state_dict.h"

namespace wf::nn {
class Module;
}  // namespace wf::nn

namespace wf::train {

struct Checkpoint {
  std::string dir;  // where load() read it from (messages name it); save() does not use it
  std::int64_t step = 0;
  nn::StateDict model;
  nn::StateDict optimizer;
  std::string config_yaml;
  // RNG, data-loader position, anything else the trainer restores, as (UTF-8) strings.
  std::map<std::string, std::string> state;
};

// A check of a loaded checkpoint against what will use it (the model): throws wf::Error naming
// the problem to reject the checkpoint, which load_latest() then treats like a corrupt one.
using CheckpointCheck = std::function<void(const Checkpoint&)>;

// One writer per directory: save() removes any leftover .tmp-* entries it finds.
class CheckpointStore {
 public:
  // keep: how many checkpoints save() leaves (the newest by step); 0 keeps all.
  CheckpointStore(std::string dir, std::int64_t keep);

  // Writes `checkpoint` as a format 3 (whole tensors, one process) checkpoint: kept for the
  // tests of version 3 compatibility; the trainer writes format 4 (save_sharded_checkpoint).
  // Writes `checkpoint` as <dir>/step-<step>, replacing one of the same step, then prunes to
  // `keep`. Returns the checkpoint's directory. wf::Error naming the path on failure, with the
  // existing checkpoints untouched.
  std::string save(const Checkpoint& checkpoint);

  // The newest checkpoint of at most step `at_most` (any step when absent) that loads and passes
  // `check`; a corrupt, incomplete or rejected newer one is skipped with a warning naming it and
  // the error. nullopt when there is none; wf::Error when there are some but none loads.
  std::optional<Checkpoint> load_latest(const CheckpointCheck& check = {},
                                        std::optional<std::int64_t> at_most = std::nullopt) const;

  // The newest checkpoint directory of at most step `at_most` for which `try_load(dir)` returns;
  // one for which it throws wf::Error is skipped with a warning naming it and the error. nullopt
  // when there is none; wf::Error when there are some but none loads. load_latest() and the
  // distributed checkpoints' resume (Trainer::resume) are built on it.
  std::optional<std::string> find_latest(const std::function<void(const std::string&)>& try_load,
                                         std::optional<std::int64_t> at_most = std::nullopt) const;

  // Verifies the manifest's own checksum, that its step is the directory's (step-00000010 holds
  // step 10), and the files' sizes and checksums, then loads. wf::Error naming the file, the
  // expected and actual checksum, and the fix when the checkpoint is corrupt or was edited.
  Checkpoint load(const std::string& checkpoint_dir) const;

  // Directories of the complete checkpoints (those with a manifest), oldest step first.
  std::vector<std::string> list() const;

  const std::string& dir() const { return dir_; }
  std::int64_t keep() const { return keep_; }

 private:
  std::string dir_;
  std::int64_t keep_;
};

// The non-negative integer (an RNG offset, a data position) at `key` of checkpoint.state, or
// nullopt when absent. wf::Error naming the checkpoint, the key and the value when it is not an
// integer from 0 to `max` (a sign, spaces, an overflow).
std::optional<std::uint64_t> state_uint(const Checkpoint& checkpoint, const std::string& key,
                                        std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

// Checks that checkpoint.model is `model`'s state: the same names, each with the parameter's
// whole (unsplit, unpadded) shape and the model's dtype. wf::Error naming the checkpoint, its
// model file and each tensor that differs otherwise.
void check_model_fits(const Checkpoint& checkpoint, const nn::Module& model);

}  // namespace wf::train

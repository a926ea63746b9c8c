#pragma once
// Distributed checkpoints (format version 4): every rank writes the pieces of the training state
// it is the writer of (train/sharded_tensor.h) into a safetensors file of its own, and any layout
// loads them back, each rank reading only the stored bytes that intersect its own pieces.
//
//   <dir>/step-00000010/rank-00000.safetensors   rank 0's pieces, tensor name = piece key
//                      /rank-00001.safetensors
//                      /manifest.json            format, version 4, step, config, state map, world
//                                                size, each file's size and SHA-256, and the index:
//                                                every tensor's global shape and dtype and its
//                                                pieces (file, tp slice, flat range)
//
// A save is collective and atomic: the ranks write into one temporary directory (rank 0 names it),
// rank 0 gathers every rank's file index, writes the manifest and renames the directory into
// place; a failure on any rank fails the save on every rank with the same message, and a crash at
// any moment leaves the previous checkpoint the newest complete one. A version 3 checkpoint
// (model.safetensors and optimizer.safetensors of whole tensors) reads as whole pieces, so it
// reshards too. docs/checkpoints.md describes the format.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/sharded_tensor.h"

namespace wf::train {

// Writes the checkpoint of `step` into store.dir() (collective over `world`): each rank's pieces
// with writer set (their data on the CPU or not; keys unique per rank), the state map and the
// config (rank 0's are used), then prunes to the store's keep. Returns the checkpoint's directory.
// wf::Error with the same message on every rank when any rank fails (a full disk, pieces that do
// not tile their tensor), nothing of the new checkpoint left visible.
//
// Test-only hook: WF_TEST_CRASH_IN_SAVE=after_rank_files|after_manifest|after_rename makes rank 0
// SIGKILL itself at that point of the save (tests/train/kill_during_save_test.sh).
std::string save_sharded_checkpoint(const CheckpointStore& store, std::int64_t step, const ShardedStateDict& pieces,
                                    const std::map<std::string, std::string>& state, const std::string& config_yaml,
                                    comm::Group& world);

// A checkpoint directory opened for reading (version 3 or 4), on one rank, no communication.
class CheckpointReader {
 public:
  // Where one stored piece lies: its file and its place in the global tensor.
  struct StoredPiece {
    std::string file;  // in the checkpoint directory
    std::string entry;  // the piece's name in that file: the key, or "<key>@<flat_begin>" for a rank's second piece
    int dim = -1;      // the tp slice: dim (-1: whole), start and length in the padded index space
    std::int64_t start = 0;
    std::int64_t length = 0;
    std::int64_t flat_begin = 0;  // of the slice's row-major elements
    std::int64_t flat_end = 0;
  };
  struct TensorInfo {
    std::string key;
    DType dtype = DType::f32;
    Shape shape;  // global, unpadded
    std::vector<StoredPiece> pieces;
  };

  // Reads and verifies the manifest (its own checksum, its step against the directory's name)
  // and checks that every file it lists is there with its size. wf::Error naming the file and
  // the fix otherwise. File checksums are verified when a file is first read.
  explicit CheckpointReader(std::string checkpoint_dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const { return dir_; }
  std::int64_t version() const { return version_; }
  std::int64_t step() const { return step_; }
  const std::string& config_yaml() const { return config_yaml_; }
  const std::map<std::string, std::string>& state() const { return state_; }
  int world_size() const { return world_size_; }  // of the run that wrote it (version 3: 0, unknown)
  // The tensors, by key.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view key) const;
  // The files and their sizes, as the manifest lists them.
  const std::map<std::string, std::uint64_t>& files() const { return file_bytes_; }

  // Fills every target's data (on the CPU) from the stored pieces that intersect it (padding
  // rows: zeros).
  // Every target is checked first (its key stored, the same global shape and dtype, fully
  // covered), then read: wf::Error naming the key and the checkpoint otherwise, or naming a file
  // that fails its checksum.
  void load(ShardedStateDict& targets);
  // The whole, unpadded tensor of `key`.
  Tensor load_whole(const std::string& key);
  // Verifies the SHA-256 of every file (the loads verify the files they read).
  void verify_all_files();
  // A Checkpoint with this one's dir, step, config and state, no tensors (for state_uint).
  Checkpoint header() const;

 private:
  struct OpenFile;
  OpenFile& open(const std::string& file);
  void read_whole_tensor_index();  // version 3: the two files' headers are the index

  std::string dir_;
  std::int64_t version_ = 0;
  std::int64_t step_ = 0;
  std::string config_yaml_;
  std::map<std::string, std::string> state_;
  int world_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // key -> its position in tensors_
  std::map<std::string, std::uint64_t> file_bytes_;
  std::map<std::string, std::string> file_sha256_;
  std::map<std::string, std::unique_ptr<OpenFile>> open_;
};

// Writes the checkpoint at `checkpoint_dir` as one safetensors file `out` of whole, unpadded
// tensors under their global names, sorted by name: model tensors only, or with `optimizer` its
// state too. The same checkpoint written under any layout exports to the same bytes. Returns the
// number of tensors written.
std::size_t export_checkpoint(const std::string& checkpoint_dir, const std::string& out, bool optimizer = false);

// Whether `key` is optimizer state ("<parameter>.step|exp_avg|exp_avg_sq"), not a model tensor.
bool is_optimizer_key(std::string_view key);

}  // namespace wf::train

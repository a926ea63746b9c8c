#pragma once
// The checkpoint directory's conventions (internal), shared by the version 3 whole-tensor store
// (checkpoint.cpp) and the version 4 distributed checkpoints (distributed_checkpoint.cpp,
// checkpoint_reader.cpp): step directory names, the self-checksummed manifest, file checks,
// the rename that makes a checkpoint visible, pruning. docs/checkpoints.md describes the format.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wallfacer/nn/state_dict.h"

namespace wf::train::detail {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

inline constexpr const char* kFormat = "wallfacer-checkpoint";
// 2: whole tensors under global names, the optimizer's keyed by parameter name (sharded_state.h),
// and qkv rows grouped per kv head (self_attention.h). 3: the manifest carries the SHA-256 of its
// own content; a version 2 manifest, which has none, could be edited unnoticed and is refused.
// 4: one safetensors file per rank holding that rank's pieces, indexed by the manifest
// (distributed_checkpoint.h). Version 3 is still read (as whole pieces); only 4 is written by the
// trainer.
inline constexpr std::int64_t kWholeTensorVersion = 3;
inline constexpr std::int64_t kShardedVersion = 4;
inline constexpr const char* kManifest = "manifest.json";
// The SHA-256 of the manifest's other fields, kept in the manifest itself (manifest_digest).
inline constexpr const char* kManifestChecksum = "manifest_sha256";
// A manifest is a config, a few strings and an index of pieces: anything near this size is not
// one, and is refused before it is read into memory.
inline constexpr std::uintmax_t kMaxManifestBytes = 64 << 20;
inline constexpr const char* kModelFile = "model.safetensors";          // version 3
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";  // version 3
inline constexpr const char* kStepPrefix = "step-";
inline constexpr const char* kTmpPrefix = ".tmp-";

std::string step_name(std::int64_t step);
// The step of a directory named step-<digits>, or nullopt for any other name.
std::optional<std::int64_t> parse_step_name(const std::string& name);
// The name of `checkpoint_dir` as given ("ckpt/step-00000010/" and "." name their last component).
std::string dir_name(const std::string& checkpoint_dir);
std::string corrupt_fix(const std::string& checkpoint_dir);

// The fields every manifest starts with: format, version, step, config_yaml, state.
Json manifest_head(std::int64_t version, std::int64_t step, const std::string& config_yaml,
                   const std::map<std::string, std::string>& state);
// Its config_yaml and state (strings), checked.
std::string manifest_config(const Json& manifest, const std::string& checkpoint_dir);
std::map<std::string, std::string> manifest_state(const Json& manifest, const std::string& checkpoint_dir);

struct WrittenFile {
  std::string name;
  std::uint64_t bytes;
  std::string sha256;
};
// Writes <dir>/<name> as a safetensors file (atomically, synced), hashing the bytes on their way
// to disk rather than reading the file back.
WrittenFile write_hashed_safetensors(const fs::path& dir, const std::string& name, const nn::StateDict& tensors);

// A manifest field, checked: wf::Error naming the manifest, the field and the fix otherwise.
const Json& field(const Json& object, const char* key, bool (Json::*is_type)() const noexcept, const char* type,
                  const std::string& manifest, const std::string& checkpoint_dir);
// Adds the manifest's own checksum and returns its text (wf::Error naming `path` for config or
// state values that are not UTF-8).
std::string sealed_manifest_text(Json manifest, const std::string& path);
// <checkpoint_dir>/manifest.json parsed, of a version this build reads (3 or 4), verified against
// its own checksum and its step against the directory's name before any field is used.
Json read_manifest(const std::string& checkpoint_dir);
// The manifest's "files": name → size and SHA-256, checked to be plain names.
struct FileRecord {
  std::uint64_t bytes = 0;
  std::string sha256;
};
std::map<std::string, FileRecord> manifest_files(const Json& manifest, const std::string& checkpoint_dir);
// Checks <checkpoint_dir>/<name>: present (wf::Error naming it otherwise), of `expected_bytes`,
// and unless `expected_sha256` is empty its SHA-256.
void check_file(const std::string& checkpoint_dir, const std::string& name, std::uint64_t expected_bytes,
                const std::string& expected_sha256);

// step-* directories of `store` by step, oldest first; with_manifest keeps the complete ones.
std::vector<std::pair<std::int64_t, fs::path>> step_dirs(const fs::path& store, bool with_manifest);
// Removes the .tmp-* leftovers of interrupted saves (the store has one writer at a time).
void remove_tmp_leftovers(const fs::path& store);
// A fresh temporary directory for the checkpoint of `step`.
fs::path make_tmp_dir(const fs::path& store, std::int64_t step);
// Renames the complete `tmp_dir` to <store>/step-<step>, replacing a checkpoint of the same step,
// and syncs the store directory: the moment the checkpoint becomes visible. Returns its path.
fs::path commit_checkpoint_dir(const fs::path& store, const fs::path& tmp_dir, std::int64_t step);
// Leaves the newest `keep` checkpoints (0: all); `kept` stays even when older-numbered.
void prune_checkpoints(const fs::path& store, const fs::path& kept, std::int64_t keep);

}  // namespace wf::train::detail
